package certverifycli

import (
	"context"
	"flag"
	"io"

	"polc.dev/polc/chain"
)

// consistencyParams are the arguments of `certverify consistency OLD NEW`.
type consistencyParams struct {
	common
	old, new, proof, chainLog, trust string
}

func (p *consistencyParams) parse(args []string) (string, error) {
	fs := flag.NewFlagSet("consistency", flag.ContinueOnError)
	p.register(fs)
	fs.StringVar(&p.proof, "proof", "", "consistency proof file")
	fs.StringVar(&p.chainLog, "chain", "", "the chain, instead of a proof")
	fs.StringVar(&p.trust, "trust", "", "trust file")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return p.format, err
	}
	if err := p.check(); err != nil {
		return p.format, err
	}
	if len(pos) != 2 {
		return p.format, &usageError{"consistency takes OLD and NEW checkpoints"}
	}
	if (p.proof == "") == (p.chainLog == "") {
		return p.format, &usageError{"consistency needs exactly one of --proof FILE and --chain LOG"}
	}
	p.old, p.new = pos[0], pos[1]
	return p.format, nil
}

// runConsistency checks that NEW extends OLD.
func runConsistency(ctx context.Context, p consistencyParams) (*Report, error) {
	trust, err := loadTrust(p.trust)
	if err != nil {
		return nil, err
	}
	oldB, err := readInput("old checkpoint", p.old, chain.MaxNoteBytes)
	if err != nil {
		return nil, err
	}
	newB, err := readInput("new checkpoint", p.new, chain.MaxNoteBytes)
	if err != nil {
		return nil, err
	}
	in := chain.ConsistencyInput{Old: oldB, New: newB, Trust: trust, MaxFindings: p.maxFindings}
	if p.proof != "" {
		if in.Proof, err = readInput("proof", p.proof, chain.MaxNoteBytes); err != nil {
			return nil, err
		}
	} else {
		f, err := openLog(p.chainLog)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in.Log = io.Reader(f)
	}
	a, err := chain.AuditConsistency(in)
	if err != nil {
		return nil, &inputError{err}
	}
	r := newReport("consistency")
	r.addFindings(a.Findings)
	if a.Result != nil {
		r.Chain = summarize(a.Result)
		r.FindingsOmitted = a.Result.Omitted
		r.Stats.Records, r.Stats.Bytes = a.Result.Records, a.Result.Bytes
	}
	for _, cp := range []*chain.CheckpointReport{a.Old, a.New} {
		if cp != nil {
			r.Checkpoints = append(r.Checkpoints, *cp)
			r.Anchors = append(r.Anchors, chain.Anchor{Kind: "checkpoint", Size: cp.Size, Covers: cp.Verified, Verified: cp.Verified, Keys: cp.Signers})
		}
	}
	return r, nil
}
