package chain

import (
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Anchor is something trusted that covers (part of) a chain.
type Anchor struct {
	Kind     string   `json:"kind"` // expected_head, checkpoint, certificate
	Size     uint64   `json:"size"` // records covered
	Covers   bool     `json:"covers_head"`
	Verified bool     `json:"verified"`
	Keys     []string `json:"keys"` // name+hex8 of the keys that signed it
}

// CheckpointReport describes one checkpoint given to an audit.
type CheckpointReport struct {
	Origin   string   `json:"origin"`
	Size     uint64   `json:"size"`
	Root     string   `json:"root"`
	Signers  []string `json:"signers"`
	Verified bool     `json:"verified"`
	Note     string   `json:"note"` // verbatim, so a report is self-contained evidence
}

// AuditInput is everything an auditor supplies for a chain.
type AuditInput struct {
	Log           io.Reader
	ExpectedHead  *Hash
	Checkpoints   [][]byte // signed notes
	Trust         *Trust   // nil: nothing can verify a signature
	RequireClosed bool
	MaxFindings   int
}

// Audit is the outcome of AuditChain.
type Audit struct {
	Result      *Result
	Checkpoints []CheckpointReport
	Anchors     []Anchor
	// Findings holds every finding: the chain's, then the anchors'.
	Findings []Finding
}

// Anchored reports whether something trusted covers the chain's head.
func (a *Audit) Anchored() bool {
	for _, x := range a.Anchors {
		if x.Verified && x.Covers {
			return true
		}
	}
	return false
}

// AuditChain verifies a chain and every anchor supplied for it: an expected
// head and signed checkpoints (checked against trust, their origin, their
// size and the root at that size, with key windows checked against the
// created_at of the last record the checkpoint covers). When nothing trusted
// covers the head it adds an unanchored finding. The error is non-nil only
// when reading the log fails.
func AuditChain(in AuditInput) (*Audit, error) {
	a := &Audit{}
	var notes []*SignedNote
	var sizes []uint64
	var early []Finding
	for i, cp := range in.Checkpoints {
		sn, err := OpenCheckpoint(cp, in.Trust)
		if err != nil {
			early = append(early, NewFinding(CodeMalformedCheckpoint, fmt.Sprintf("checkpoint %d: %v", i+1, err)))
			notes = append(notes, nil)
			continue
		}
		notes = append(notes, sn)
		sizes = append(sizes, sn.Checkpoint.Size)
	}
	res, err := Verify(in.Log, VerifyOptions{ExpectedHead: in.ExpectedHead, RootSizes: sizes, RequireClosed: in.RequireClosed, MaxFindings: in.MaxFindings})
	if err != nil {
		return nil, err
	}
	a.Result = res
	a.Findings = append(append(a.Findings, res.Findings...), early...)
	if in.ExpectedHead != nil {
		a.Anchors = append(a.Anchors, Anchor{Kind: "expected_head", Size: uint64(res.Records), Covers: res.HeadMatched, Verified: res.HeadMatched, Keys: []string{}})
	}
	for _, sn := range notes {
		if sn == nil {
			continue
		}
		fs, anchor, rep := checkNoteAgainst(sn, res)
		a.Findings = append(a.Findings, fs...)
		a.Anchors = append(a.Anchors, anchor)
		a.Checkpoints = append(a.Checkpoints, rep)
	}
	if !a.Anchored() && noErrors(a.Findings) {
		a.Findings = append(a.Findings, unanchored(in.ExpectedHead != nil || len(in.Checkpoints) > 0))
	}
	return a, nil
}

func unanchored(tried bool) Finding {
	msg := "no expected head, trusted checkpoint or trusted signature covers the head: truncation or a rewrite of the whole chain would not be detected"
	if tried {
		msg = "the anchors supplied do not cover the head: records after them are not protected against truncation or rewrite"
	}
	return NewFinding(CodeUnanchored, msg)
}

// checkNoteAgainst compares a checkpoint with a verified chain.
func checkNoteAgainst(sn *SignedNote, res *Result) ([]Finding, Anchor, CheckpointReport) {
	c := sn.Checkpoint
	fs := append([]Finding(nil), sn.Findings...)
	rep := CheckpointReport{Origin: Origin(c.ChainID), Size: c.Size, Root: base64.StdEncoding.EncodeToString(c.Root[:]), Note: sn.Text, Signers: []string{}}
	for _, k := range sn.Signers {
		rep.Signers = append(rep.Signers, k.ID())
	}
	ok := true
	if res.ChainID != "" && c.ChainID != res.ChainID {
		fs = append(fs, NewFinding(CodeChainIDMismatch, "checkpoint is for another chain").Values(Origin(res.ChainID), Origin(c.ChainID)))
		ok = false
	}
	var signedAt *time.Time
	switch {
	case !ok:
	case c.Size > uint64(res.Records):
		fs = append(fs, NewFinding(CodeTruncated, fmt.Sprintf("checkpoint covers %d records; the chain has %d", c.Size, res.Records)).Values(strconv.FormatUint(c.Size, 10)+" records", strconv.FormatInt(res.Records, 10)+" records"))
		ok = false
	default:
		if root := res.Roots[c.Size]; root != c.Root {
			fs = append(fs, NewFinding(CodeRootMismatch, fmt.Sprintf("Merkle root of the first %d records differs from the checkpoint's", c.Size)).Values(
				base64.StdEncoding.EncodeToString(c.Root[:]), base64.StdEncoding.EncodeToString(root[:])))
			ok = false
		}
		if ts, found := res.Times[c.Size]; found {
			t, err := ParseTime(ts)
			if err == nil {
				signedAt = &t
			}
		}
	}
	vf := CheckValidity(sn.Signers, signedAt, "checkpoint")
	fs = append(fs, vf...)
	verified := ok && sn.Anchored() && len(vf) == 0
	rep.Verified = verified
	return fs, Anchor{Kind: "checkpoint", Size: c.Size, Covers: c.Size == uint64(res.Records) && c.Size > 0, Verified: verified, Keys: rep.Signers}, rep
}

// InclusionInput is a single record and its tlog-proof.
type InclusionInput struct {
	Record []byte // one record line (a trailing newline is allowed)
	Proof  []byte // c2sp.org/tlog-proof@v1
	Trust  *Trust
}

// InclusionAudit is the outcome of AuditInclusion.
type InclusionAudit struct {
	Record     *Record
	Checkpoint *CheckpointReport
	Findings   []Finding
	Anchored   bool
}

// AuditInclusion checks that a record is in the chain a trusted log
// checkpointed: the record's own hashes, that the proof's index is its
// sequence, that the checkpoint is for its chain, the Merkle audit path, and
// the checkpoint's signatures. A signer's validity window can be checked only
// when the record is the last one the checkpoint covers (its created_at is
// then the signed time); otherwise the result is validity_unchecked.
func AuditInclusion(in InclusionInput) *InclusionAudit {
	out := &InclusionAudit{}
	add := func(f Finding) { out.Findings = append(out.Findings, f) }
	line := in.Record
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	rec, err := ParseRecord(line)
	if err != nil {
		re := err.(*RecordError)
		add(NewFinding(re.Code, "record: "+re.Msg).Values(re.Expected, re.Actual))
		return out
	}
	out.Record = rec
	p, err := ParseInclusionProof(in.Proof)
	if err != nil {
		add(NewFinding(CodeMalformedProof, err.Error()))
		return out
	}
	sn, err := OpenCheckpoint(p.Checkpoint, in.Trust)
	if err != nil {
		add(NewFinding(CodeMalformedCheckpoint, err.Error()))
		return out
	}
	c := sn.Checkpoint
	rep := CheckpointReport{Origin: Origin(c.ChainID), Size: c.Size, Root: base64.StdEncoding.EncodeToString(c.Root[:]), Note: sn.Text, Signers: []string{}}
	for _, k := range sn.Signers {
		rep.Signers = append(rep.Signers, k.ID())
	}
	out.Checkpoint = &rep
	out.Findings = append(out.Findings, sn.Findings...)
	seq := rec.Sequence
	ok := true
	if c.ChainID != rec.ChainID {
		add(NewFinding(CodeChainIDMismatch, "checkpoint is for another chain than the record").At(seq, 0).Values(Origin(rec.ChainID), Origin(c.ChainID)))
		ok = false
	}
	if p.Index != uint64(seq) {
		add(NewFinding(CodeInclusionFailed, "proof index is not the record's sequence").At(seq, 0).Values(strconv.FormatInt(seq, 10), strconv.FormatUint(p.Index, 10)))
		ok = false
	} else if err := VerifyInclusion(rec.Hash(), p.Index, c.Size, p.Path, c.Root); err != nil {
		pe := err.(*ProofError)
		f := NewFinding(CodeInclusionFailed, "inclusion proof does not verify: "+pe.Error()).At(seq, 0)
		if pe.Msg == "" {
			f = f.Values(base64.StdEncoding.EncodeToString(pe.Expected[:]), base64.StdEncoding.EncodeToString(pe.Calculated[:]))
		}
		add(f)
		ok = false
	}
	var signedAt *time.Time
	if uint64(seq) == c.Size-1 {
		if t, err := ParseTime(rec.CreatedAt); err == nil {
			signedAt = &t
		}
	}
	vf := CheckValidity(sn.Signers, signedAt, "checkpoint")
	out.Findings = append(out.Findings, vf...)
	rep.Verified = ok && sn.Anchored() && len(vf) == 0
	out.Anchored = rep.Verified
	if ok && !out.Anchored && noErrors(out.Findings) {
		add(NewFinding(CodeUnanchored, "the proof verifies, but no trusted log key signed its checkpoint"))
	}
	return out
}

func noErrors(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == SeverityError || f.Severity == SeverityUnsupported {
			return false
		}
	}
	return true
}

// ConsistencyInput is two checkpoints and either a proof or the chain.
type ConsistencyInput struct {
	Old, New []byte    // signed checkpoint notes
	Proof    []byte    // polc.dev/consistency-proof@v1, or nil
	Log      io.Reader // the chain, used when Proof is nil
	Trust    *Trust
	// MaxFindings bounds the chain's findings (DefaultMaxFindings if 0).
	MaxFindings int
}

// ConsistencyAudit is the outcome of AuditConsistency.
type ConsistencyAudit struct {
	Old, New *CheckpointReport
	Result   *Result // set when the chain was used
	Findings []Finding
	Anchored bool
}

// AuditConsistency checks that the new checkpoint extends the old one: same
// chain, old size <= new size, and either the consistency proof verifies or
// the chain (verified in full) has both roots at both sizes. Both notes are
// kept verbatim in the result, so a failure is self-contained evidence of
// log misbehaviour. The error is non-nil only when reading the log fails.
func AuditConsistency(in ConsistencyInput) (*ConsistencyAudit, error) {
	out := &ConsistencyAudit{}
	add := func(f Finding) { out.Findings = append(out.Findings, f) }
	oldN, err := OpenCheckpoint(in.Old, in.Trust)
	if err != nil {
		add(NewFinding(CodeMalformedCheckpoint, "old checkpoint: "+err.Error()))
		return out, nil
	}
	newN, err := OpenCheckpoint(in.New, in.Trust)
	if err != nil {
		add(NewFinding(CodeMalformedCheckpoint, "new checkpoint: "+err.Error()))
		return out, nil
	}
	report := func(sn *SignedNote) *CheckpointReport {
		c := sn.Checkpoint
		r := &CheckpointReport{Origin: Origin(c.ChainID), Size: c.Size, Root: base64.StdEncoding.EncodeToString(c.Root[:]), Note: sn.Text, Signers: []string{}}
		for _, k := range sn.Signers {
			r.Signers = append(r.Signers, k.ID())
		}
		return r
	}
	out.Old, out.New = report(oldN), report(newN)
	out.Findings = append(append(out.Findings, oldN.Findings...), newN.Findings...)
	o, n := oldN.Checkpoint, newN.Checkpoint
	ok := true
	if o.ChainID != n.ChainID {
		add(NewFinding(CodeChainIDMismatch, "the checkpoints are for different chains").Values(Origin(o.ChainID), Origin(n.ChainID)))
		ok = false
	}
	var oldAt, newAt *time.Time
	switch {
	case !ok:
	case o.Size > n.Size:
		// Both may be prefixes of one chain, but the new checkpoint does
		// not extend the old one: a log that went back (whatever the
		// proof or the chain says).
		add(NewFinding(CodeConsistencyFailed, fmt.Sprintf("the new checkpoint (size %d) is smaller than the old one (size %d)", n.Size, o.Size)).Values(
			fmt.Sprintf("new size >= %d", o.Size), strconv.FormatUint(n.Size, 10)))
		ok = false
	case in.Proof != nil:
		p, err := ParseConsistencyProof(in.Proof)
		if err != nil {
			add(NewFinding(CodeMalformedProof, err.Error()))
			return out, nil
		}
		if p.Old != o.Size || p.New != n.Size {
			add(NewFinding(CodeConsistencyFailed, "proof sizes differ from the checkpoints'").Values(
				fmt.Sprintf("%d -> %d", o.Size, n.Size), fmt.Sprintf("%d -> %d", p.Old, p.New)))
			ok = false
		} else if err := VerifyConsistency(o.Size, n.Size, o.Root, n.Root, p.Path); err != nil {
			pe := err.(*ProofError)
			f := NewFinding(CodeConsistencyFailed, "consistency proof does not verify: "+pe.Error())
			if pe.Msg == "" {
				f = f.Values(base64.StdEncoding.EncodeToString(pe.Expected[:]), base64.StdEncoding.EncodeToString(pe.Calculated[:]))
			}
			add(f)
			ok = false
		}
	case in.Log != nil:
		res, err := Verify(in.Log, VerifyOptions{RootSizes: []uint64{o.Size, n.Size}, MaxFindings: in.MaxFindings})
		if err != nil {
			return nil, err
		}
		out.Result = res
		out.Findings = append(out.Findings, res.Findings...)
		for _, x := range []struct {
			name string
			c    Checkpoint
			at   **time.Time
		}{{"old", o, &oldAt}, {"new", n, &newAt}} {
			if res.ChainID != "" && x.c.ChainID != res.ChainID {
				add(NewFinding(CodeChainIDMismatch, x.name+" checkpoint is for another chain than the log").Values(Origin(res.ChainID), Origin(x.c.ChainID)))
				ok = false
				continue
			}
			if x.c.Size > uint64(res.Records) {
				add(NewFinding(CodeTruncated, fmt.Sprintf("%s checkpoint covers %d records; the chain has %d", x.name, x.c.Size, res.Records)).Values(strconv.FormatUint(x.c.Size, 10), strconv.FormatInt(res.Records, 10)))
				ok = false
				continue
			}
			if root := res.Roots[x.c.Size]; root != x.c.Root {
				add(NewFinding(CodeConsistencyFailed, fmt.Sprintf("%s checkpoint's root is not the chain's root at size %d", x.name, x.c.Size)).Values(
					base64.StdEncoding.EncodeToString(x.c.Root[:]), base64.StdEncoding.EncodeToString(root[:])))
				ok = false
			}
			if ts, found := res.Times[x.c.Size]; found {
				if t, err := ParseTime(ts); err == nil {
					*x.at = &t
				}
			}
		}
		if !res.OK() {
			ok = false
		}
	default:
		add(NewFinding(CodeMalformedProof, "neither a consistency proof nor the chain was given"))
		return out, nil
	}
	vf := append(CheckValidity(oldN.Signers, oldAt, "old checkpoint"), CheckValidity(newN.Signers, newAt, "new checkpoint")...)
	out.Findings = append(out.Findings, vf...)
	out.Old.Verified = ok && oldN.Anchored() && len(vf) == 0
	out.New.Verified = ok && newN.Anchored() && len(vf) == 0
	out.Anchored = out.Old.Verified && out.New.Verified
	if ok && !out.Anchored && noErrors(out.Findings) {
		add(NewFinding(CodeUnanchored, "consistent, but the checkpoints are not both signed by trusted log keys"))
	}
	return out, nil
}
