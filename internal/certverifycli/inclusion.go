package certverifycli

import (
	"context"
	"flag"

	"polc.dev/polc/chain"
)

// inclusionParams are the arguments of `certverify inclusion RECORD PROOF`.
type inclusionParams struct {
	common
	record, proof, trust string
}

func (p *inclusionParams) parse(args []string) (string, error) {
	fs := flag.NewFlagSet("inclusion", flag.ContinueOnError)
	p.register(fs)
	fs.StringVar(&p.trust, "trust", "", "trust file")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return p.format, err
	}
	if err := p.check(); err != nil {
		return p.format, err
	}
	if len(pos) != 2 {
		return p.format, &usageError{"inclusion takes RECORD and PROOF"}
	}
	p.record, p.proof = pos[0], pos[1]
	return p.format, nil
}

// runInclusion checks one record against a tlog-proof.
func runInclusion(ctx context.Context, p inclusionParams) (*Report, error) {
	trust, err := loadTrust(p.trust)
	if err != nil {
		return nil, err
	}
	rec, err := readInput("record", p.record, chain.MaxRecordBytes+1)
	if err != nil {
		return nil, err
	}
	proof, err := readInput("proof", p.proof, chain.MaxNoteBytes)
	if err != nil {
		return nil, err
	}
	a := chain.AuditInclusion(chain.InclusionInput{Record: rec, Proof: proof, Trust: trust})
	r := newReport("inclusion")
	r.addFindings(a.Findings)
	if a.Record != nil {
		r.Record = &RecordSummary{ChainID: a.Record.ChainID, RecordID: a.Record.RecordID, Sequence: a.Record.Sequence, ChainHash: a.Record.ChainHash}
		r.Stats.Records = 1
	}
	r.Stats.Bytes = int64(len(rec))
	if a.Checkpoint != nil {
		r.Checkpoints = append(r.Checkpoints, *a.Checkpoint)
		r.Anchors = append(r.Anchors, chain.Anchor{Kind: "checkpoint", Size: a.Checkpoint.Size, Covers: a.Anchored, Verified: a.Anchored, Keys: a.Checkpoint.Signers})
	}
	return r, nil
}
