package certificate

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/snapshot"
)

// VerifyInput is what an auditor supplies to check a certificate.
type VerifyInput struct {
	// Certificate is an unsigned certificate file or a DSSE envelope.
	Certificate []byte
	// Chain is the certificate's evidence chain (JSONL).
	Chain io.Reader
	// Snapshot is the policy snapshot file (nil: the pin is unchecked; over
	// MaxSnapshotBytes: policy_mismatch).
	Snapshot []byte
	// Trust verifies the envelope's signatures (nil: none can verify).
	Trust *chain.Trust
	// ExpectedHead, when set, must be the chain's head.
	ExpectedHead *chain.Hash
	MaxFindings  int
}

// Report is the outcome of Verify.
type Report struct {
	Certificate *Certificate // nil when it did not parse
	Signed      bool         // the input was a DSSE envelope
	Signers     []string     // trusted certifier keys that verified (name+hex8)
	Chain       *chain.Result
	Findings    []chain.Finding
	Anchored    bool
}

// Verify re-derives everything a certificate states from the chain and
// compares: the chain verifies and is closed at its head; chain id, task
// boundary, policy id/version/digest, head, tree size and Merkle root match;
// gate_summary and process_grade equal what the records give; with a
// snapshot, its digest recomputes and equals the certificate's and the
// chain's; with a trust file, the envelope is signed by a certifier key
// valid at minted_at, and every recorded approval verifies under its
// approver keys (CheckApprovals). It adds unanchored when neither a matching expected
// head nor a trusted signature covers the head. The error is non-nil only
// when reading the chain fails.
func Verify(in VerifyInput) (*Report, error) {
	rep := &Report{}
	add := func(f chain.Finding) { rep.Findings = append(rep.Findings, f) }
	payload := in.Certificate
	var sigs *SignatureCheck
	if isEnvelope(in.Certificate) {
		rep.Signed = true
		sc, err := OpenEnvelope(in.Certificate, in.Trust)
		if err != nil {
			add(chain.NewFinding(chain.CodeMalformedCertificate, err.Error()))
			payload = nil
		} else {
			sigs = sc
			payload = sc.Payload
		}
	}
	var cert *Certificate
	if payload != nil {
		c, err := Parse(payload)
		if err != nil {
			add(chain.NewFinding(chain.CodeMalformedCertificate, err.Error()))
		} else {
			cert = c
		}
	}
	rep.Certificate = cert
	res, err := chain.Verify(in.Chain, chain.VerifyOptions{ExpectedHead: in.ExpectedHead, RequireClosed: true, MaxFindings: in.MaxFindings})
	if err != nil {
		return nil, err
	}
	rep.Chain = res
	rep.Findings = append(append([]chain.Finding(nil), res.Findings...), rep.Findings...)
	if sigs != nil {
		rep.Findings = append(rep.Findings, sigs.Findings...)
	}
	if cert == nil {
		return rep, nil
	}
	mismatch := func(code chain.Code, field, exp, act string) {
		if exp != act {
			add(chain.NewFinding(code, field+" differs from the chain's").Values(exp, act))
		}
	}
	// expected = what the records give, actual = what the certificate says
	mismatch(chain.CodeChainIDMismatch, "chain_id", res.ChainID, cert.ChainID)
	if res.Close != nil {
		// The task_closed record is what these name: findings point at it.
		if res.Close.TaskBoundaryID != cert.TaskBoundaryID {
			add(chain.NewFinding(chain.CodeBoundaryMismatch, "task_boundary_id differs from the chain's task_closed record's").
				Values(res.Close.TaskBoundaryID, cert.TaskBoundaryID).At(res.Close.Sequence, res.Close.Line))
		}
	} else {
		mismatch(chain.CodeBoundaryMismatch, "task_boundary_id", res.TaskBoundaryID, cert.TaskBoundaryID)
	}
	mismatch(chain.CodePolicyMismatch, "policy_id", res.PolicyID, cert.PolicyID)
	mismatch(chain.CodePolicyMismatch, "policy_version", res.PolicyVersion, cert.PolicyVersion)
	mismatch(chain.CodePolicyMismatch, "policy_digest", res.PolicyDigest, cert.PolicyDigest)
	head := ""
	if res.HasHead {
		head = res.Head.String()
	}
	if res.Close != nil && res.Close.ChainHash.String() != head {
		head = res.Close.ChainHash.String() // record_after_close is reported already
	}
	switch {
	case cert.TreeSize > res.Records:
		add(chain.NewFinding(chain.CodeTruncated, "the certificate covers more records than the chain has").Values(strconv.FormatInt(cert.TreeSize, 10), strconv.FormatInt(res.Records, 10)))
	default:
		mismatch(chain.CodeHeadMismatch, "evidence_chain_head", head, cert.EvidenceChainHead)
		mismatch(chain.CodeHeadMismatch, "tree_size", strconv.FormatInt(res.Records, 10), strconv.FormatInt(cert.TreeSize, 10))
		mismatch(chain.CodeRootMismatch, "merkle_root", base64.StdEncoding.EncodeToString(res.Root[:]), cert.MerkleRoot)
	}
	// A certificate is minted at close or after it. An earlier minted_at
	// would also put the certifier key's validity check (at minted_at)
	// before the task ended: a backdated certificate. Both times are in
	// the record time format, which compares as text.
	if res.Close != nil && cert.MintedAt < res.Close.ClosedAt {
		add(chain.NewFinding(chain.CodeMintedBeforeClose, "minted_at precedes the task_closed record's closed_at").Values(">= "+res.Close.ClosedAt, cert.MintedAt).At(res.Close.Sequence, res.Close.Line))
	}
	summary, grade := Derive(res)
	if summary != cert.GateSummary {
		add(chain.NewFinding(chain.CodeSummaryMismatch, "gate_summary differs from the chain's gate_evaluated and exception_granted records").Values(summaryString(summary), summaryString(cert.GateSummary)))
	}
	mismatch(chain.CodeGradeMismatch, "process_grade", grade, cert.ProcessGrade)
	// approvalSnap is the given snapshot when it is the chain's policy:
	// CheckApprovals bounds each approval's lifetime by its rules.
	var approvalSnap *snapshot.Snapshot
	if in.Snapshot != nil {
		var snap *snapshot.Snapshot
		var err error
		if len(in.Snapshot) > MaxSnapshotBytes {
			err = fmt.Errorf("exceeds %d bytes", MaxSnapshotBytes)
		} else {
			snap, err = snapshot.Parse(in.Snapshot)
		}
		var dm *snapshot.DigestMismatchError
		switch {
		case errors.As(err, &dm):
			add(chain.NewFinding(chain.CodePolicyMismatch, "snapshot digest does not recompute").Values(dm.Computed, dm.Declared))
		case err != nil:
			add(chain.NewFinding(chain.CodePolicyMismatch, "snapshot does not parse: "+err.Error()))
		default:
			mismatch(chain.CodePolicyMismatch, "snapshot policy_id", snap.PolicyID, cert.PolicyID)
			mismatch(chain.CodePolicyMismatch, "snapshot version", snap.Version, cert.PolicyVersion)
			if snap.Digest != cert.PolicyDigest {
				add(chain.NewFinding(chain.CodePolicyMismatch, "snapshot digest differs from the certificate's policy_digest").Values(snap.Digest, cert.PolicyDigest))
			} else if res.PolicyDigest != snap.Digest {
				add(chain.NewFinding(chain.CodePolicyMismatch, "snapshot digest differs from the chain's policy_bound digest").Values(snap.Digest, res.PolicyDigest))
			} else {
				approvalSnap = snap
			}
		}
	} else {
		add(chain.NewFinding(chain.CodePolicyUnchecked, "no snapshot given: the policy digest was not checked against the policy"))
	}
	if in.Trust != nil {
		rep.Findings = append(rep.Findings, CheckApprovals(res, in.Trust, approvalSnap)...)
	}
	signedOK := false
	if sigs != nil {
		var t *time.Time
		if mt, err := chain.ParseTime(cert.MintedAt); err == nil {
			t = &mt
		}
		vf := chain.CheckValidity(sigs.Signers, t, "certificate")
		rep.Findings = append(rep.Findings, vf...)
		for _, k := range sigs.Signers {
			rep.Signers = append(rep.Signers, k.ID())
		}
		signedOK = len(sigs.Signers) > 0 && len(vf) == 0
	}
	ok := true
	for _, f := range rep.Findings {
		if f.Severity == chain.SeverityError || f.Severity == chain.SeverityUnsupported {
			ok = false
		}
	}
	rep.Anchored = ok && (res.HeadMatched || signedOK)
	if ok && !rep.Anchored {
		msg := "the certificate matches the chain, but nothing trusted covers the head: give --expected-head, or a trust file with the certifier's key for a signed certificate"
		add(chain.NewFinding(chain.CodeUnanchored, msg))
	}
	return rep, nil
}

func summaryString(s GateSummary) string {
	b, _ := (&Certificate{GateSummary: s}).summaryJSON()
	return string(b)
}

func (c *Certificate) summaryJSON() ([]byte, error) {
	return marshalCanonical(c.GateSummary)
}
