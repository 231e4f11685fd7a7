package certificate

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/snapshot"
)

// Boundary is a closed task boundary: the chain a certificate is minted
// for, and what the mint checks it against.
type Boundary struct {
	TaskBoundaryID string
	ChainID        string
	PolicyID       string
	PolicyVersion  string
	OpenedAt       time.Time
	ClosedAt       time.Time
}

// SnapshotSource returns the exact historical snapshot file of a policy
// version, or an error wrapping ErrSnapshotNotFound.
type SnapshotSource interface {
	Snapshot(ctx context.Context, policyID, version string) ([]byte, error)
}

// ErrSnapshotNotFound is wrapped by SnapshotSource errors for a missing
// snapshot.
var ErrSnapshotNotFound = errors.New("snapshot not found")

// Rule names one mint rule (docs/evidence.md "Task certificates").
type Rule string

// The mint rules, in the order Mint checks them.
const (
	// RuleClosedAfterOpened: closed_at >= opened_at, and the certificate
	// is minted at or after closed_at.
	RuleClosedAfterOpened Rule = "closed_after_opened"
	// RuleClosedAtHead: exactly one matching task_closed sits at the
	// expected head.
	RuleClosedAtHead Rule = "task_closed_at_head"
	// RuleChainVerifies: the store verifies the chain against the expected
	// head.
	RuleChainVerifies Rule = "chain_verifies"
	// RuleMissingPolicy: the exact snapshot exists and its digest
	// recomputes and matches the chain's pin (MISSING_POLICY).
	RuleMissingPolicy Rule = "missing_policy"
	// RuleOneTerminal: every operation_started has exactly one terminal.
	RuleOneTerminal Rule = "one_terminal_per_operation"
)

// RefusedError is a refused mint: no certificate exists for the boundary.
// Code is the finding that broke the rule (when one did).
type RefusedError struct {
	Rule     Rule
	Code     chain.Code
	Msg      string
	Expected string
	Actual   string
}

func (e *RefusedError) Error() string {
	s := fmt.Sprintf("certificate: mint refused: %s", e.Rule)
	if e.Code != "" {
		s += " (" + string(e.Code) + ")"
	}
	s += ": " + e.Msg
	if e.Expected != "" || e.Actual != "" {
		s += fmt.Sprintf(" (expected %s, actual %s)", e.Expected, e.Actual)
	}
	return s
}

// Issuer mints certificates. Now and NewID are
// injectable so that output is deterministic in tests.
type Issuer struct {
	Store     chain.Store
	Snapshots SnapshotSource
	Now       func() time.Time
	NewID     func() string
}

// ruleOf maps a verification finding to the mint rule it breaks.
func ruleOf(c chain.Code) Rule {
	switch c {
	case chain.CodeMissingTerminal, chain.CodeDuplicateTerminal, chain.CodeOrphanTerminal:
		return RuleOneTerminal
	case chain.CodeTaskNotClosed, chain.CodeRecordAfterClose, chain.CodeHeadMismatch, chain.CodeBoundaryMismatch:
		return RuleClosedAtHead
	case chain.CodePolicyMismatch:
		return RuleMissingPolicy
	}
	return RuleChainVerifies
}

// Mint returns the certificate of a closed boundary, or a *RefusedError
// naming the first rule that does not hold: closed_at >= opened_at; exactly
// one task_closed, matching the boundary, at expectedHead; the stored chain
// verifies against expectedHead; every operation_started has exactly one
// terminal; the exact snapshot exists and its digest recomputes and equals
// every policy_bound's policy_digest. The gate summary and grade are derived
// from the committed records only.
func (i *Issuer) Mint(ctx context.Context, b Boundary, expectedHead chain.Hash) (*Certificate, error) {
	refuse := func(r Rule, code chain.Code, msg, exp, act string) error {
		return &RefusedError{Rule: r, Code: code, Msg: msg, Expected: exp, Actual: act}
	}
	if b.ClosedAt.Before(b.OpenedAt) {
		return nil, refuse(RuleClosedAfterOpened, "", "closed_at is before opened_at", chain.FormatTime(b.OpenedAt), chain.FormatTime(b.ClosedAt))
	}
	res, err := i.Store.Verify(ctx, b.ChainID, expectedHead)
	if err != nil {
		return nil, err
	}
	// Rule 2 first: it explains the most common refusal (not closed yet).
	if !res.Closed {
		return nil, refuse(RuleClosedAtHead, chain.CodeTaskNotClosed, "the chain has no task_closed record", string(chain.TaskClosed), "none")
	}
	cl := res.Close
	switch {
	case cl.ChainHash != expectedHead:
		return nil, refuse(RuleClosedAtHead, chain.CodeHeadMismatch, "task_closed is not at the expected head", expectedHead.String(), cl.ChainHash.String())
	case cl.TaskBoundaryID != b.TaskBoundaryID:
		return nil, refuse(RuleClosedAtHead, chain.CodeBoundaryMismatch, "task_closed closes another boundary", b.TaskBoundaryID, cl.TaskBoundaryID)
	case cl.OpenedAt != chain.FormatTime(b.OpenedAt) || cl.ClosedAt != chain.FormatTime(b.ClosedAt):
		return nil, refuse(RuleClosedAtHead, chain.CodeBoundaryMismatch, "task_closed times differ from the boundary's",
			chain.FormatTime(b.OpenedAt)+" .. "+chain.FormatTime(b.ClosedAt), cl.OpenedAt+" .. "+cl.ClosedAt)
	}
	for _, want := range []Rule{RuleClosedAtHead, RuleOneTerminal, RuleChainVerifies, RuleMissingPolicy} {
		for _, f := range res.Findings {
			if (f.Severity == chain.SeverityError || f.Severity == chain.SeverityUnsupported) && ruleOf(f.Code) == want {
				return nil, refuse(want, f.Code, f.String(), f.Expected, f.Actual)
			}
		}
	}
	if res.PolicyID != b.PolicyID || res.PolicyVersion != b.PolicyVersion {
		return nil, refuse(RuleMissingPolicy, chain.CodePolicyMismatch, "the chain pins another policy than the boundary",
			b.PolicyID+" "+b.PolicyVersion, res.PolicyID+" "+res.PolicyVersion)
	}
	if i.Snapshots == nil {
		return nil, refuse(RuleMissingPolicy, "", "no snapshot source", b.PolicyID+" "+b.PolicyVersion, "none")
	}
	raw, err := i.Snapshots.Snapshot(ctx, b.PolicyID, b.PolicyVersion)
	if err != nil {
		return nil, refuse(RuleMissingPolicy, "", err.Error(), b.PolicyID+" "+b.PolicyVersion, "none")
	}
	snap, err := snapshot.Parse(raw)
	if err != nil {
		return nil, refuse(RuleMissingPolicy, "", "snapshot does not verify: "+err.Error(), "a valid snapshot", "invalid")
	}
	switch {
	case snap.PolicyID != b.PolicyID || snap.Version != b.PolicyVersion:
		return nil, refuse(RuleMissingPolicy, chain.CodePolicyMismatch, "snapshot is for another policy version", b.PolicyID+" "+b.PolicyVersion, snap.PolicyID+" "+snap.Version)
	case res.PolicyDigest == "" && res.Operations == 0:
		// Only policy_bound records pin the policy in the chain: with no
		// operation, a certificate could name any policy and nothing an
		// auditor holds would contradict it.
		return nil, refuse(RuleMissingPolicy, "", "no operation ran under the boundary, so no policy_bound record binds a policy to the chain", snap.Digest, "none")
	case res.PolicyDigest == "":
		return nil, refuse(RuleMissingPolicy, chain.CodePolicyMismatch, "the chain has no policy_bound record", snap.Digest, "none")
	case snap.Digest != res.PolicyDigest:
		return nil, refuse(RuleMissingPolicy, chain.CodePolicyMismatch, "snapshot digest differs from the chain's policy_bound digest", snap.Digest, res.PolicyDigest)
	}
	minted := chain.FormatTime(i.Now())
	if minted < cl.ClosedAt {
		// Verification refuses such a certificate (a clock behind the
		// boundary's): do not mint one.
		return nil, refuse(RuleClosedAfterOpened, chain.CodeMintedBeforeClose, "the clock reads before the task closed", ">= "+cl.ClosedAt, minted)
	}
	summary, grade := Derive(res)
	c := &Certificate{
		CertificateID:     i.NewID(),
		TaskBoundaryID:    b.TaskBoundaryID,
		ChainID:           b.ChainID,
		PolicyID:          b.PolicyID,
		PolicyVersion:     b.PolicyVersion,
		PolicyDigest:      snap.Digest,
		EvidenceChainHead: cl.ChainHash.String(),
		TreeSize:          res.Records,
		MerkleRoot:        base64.StdEncoding.EncodeToString(res.Root[:]),
		GateSummary:       summary,
		ProcessGrade:      grade,
		MintedAt:          minted,
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// MapSnapshots is a SnapshotSource over snapshot files keyed by
// "<policy_id> <version>".
type MapSnapshots map[string][]byte

// Snapshot implements SnapshotSource.
func (m MapSnapshots) Snapshot(_ context.Context, policyID, version string) ([]byte, error) {
	b, ok := m[policyID+" "+version]
	if !ok {
		return nil, fmt.Errorf("policy %s version %s: %w", policyID, version, ErrSnapshotNotFound)
	}
	return b, nil
}
