package certverifycli

import (
	"context"
	"flag"

	"polc.dev/polc/chain"
)

// chainParams are the arguments of `certverify chain LOG`.
type chainParams struct {
	common
	log           string
	expectedHead  *chain.Hash
	checkpoints   []string
	trust         string
	requireClosed bool
}

func (p *chainParams) parse(args []string) (string, error) {
	fs := flag.NewFlagSet("chain", flag.ContinueOnError)
	p.register(fs)
	head := fs.String("expected-head", "", "64-hex chain_hash the last record must have")
	var cps multiFlag
	fs.Var(&cps, "checkpoint", "signed checkpoint note (repeatable)")
	fs.StringVar(&p.trust, "trust", "", "trust file")
	fs.BoolVar(&p.requireClosed, "require-closed", false, "fail when the chain has no task_closed")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return p.format, err
	}
	if err := p.check(); err != nil {
		return p.format, err
	}
	if len(pos) != 1 {
		return p.format, &usageError{"chain takes exactly one LOG argument"}
	}
	p.log, p.checkpoints = pos[0], cps
	if len(p.checkpoints) > 0 && p.trust == "" {
		return p.format, &usageError{"--checkpoint needs --trust to verify its signature"}
	}
	p.expectedHead, err = parseHead(*head)
	return p.format, err
}

// runChain verifies a chain file and its anchors.
func runChain(ctx context.Context, p chainParams) (*Report, error) {
	trust, err := loadTrust(p.trust)
	if err != nil {
		return nil, err
	}
	var notes [][]byte
	for _, cp := range p.checkpoints {
		b, err := readInput("checkpoint", cp, chain.MaxNoteBytes)
		if err != nil {
			return nil, err
		}
		notes = append(notes, b)
	}
	f, err := openLog(p.log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a, err := chain.AuditChain(chain.AuditInput{
		Log: f, ExpectedHead: p.expectedHead, Checkpoints: notes, Trust: trust,
		RequireClosed: p.requireClosed, MaxFindings: p.maxFindings,
	})
	if err != nil {
		return nil, &inputError{err}
	}
	r := newReport("chain")
	r.Chain = summarize(a.Result)
	r.addFindings(a.Findings)
	r.FindingsOmitted = a.Result.Omitted
	r.Anchors = append(r.Anchors, a.Anchors...)
	r.Checkpoints = append(r.Checkpoints, a.Checkpoints...)
	r.Stats.Records, r.Stats.Bytes = a.Result.Records, a.Result.Bytes
	return r, nil
}
