package evidencegen

import (
	"context"
	"time"

	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
)

// Small is a small closed chain with everything an auditor may be given
// about it: for scripts and examples.
type Small struct {
	Chain       []byte
	Head        chain.Hash
	Snapshot    []byte
	Certificate *certificate.Certificate
	Signed      []byte // DSSE envelope signed by CertifierKey
	Checkpoint  []byte // full size, signed by LogKey
	OldCheckpt  []byte // size 4, signed by LogKey
	Consistency []byte // proof from size 4 to full size
	Record      []byte // record 2's line
	Inclusion   []byte // tlog-proof of record 2 in the full tree
	Trust       []byte
}

// NewSmall builds the small fixture deterministically.
func NewSmall() *Small {
	snap, raw := Snapshot("script-policy", "2.0.0", NewIDs("script snapshot"))
	p := NewProducer("script", snap)
	gate := "gate-hard"
	p.Run(Op{Tool: "read_file", Gates: []Gate{{gate, "hard", "allow"}}, Terminal: chain.CallableCompletedPayload{DurationUS: 42, ResultDigest: Digest("ok")}})
	p.Run(Op{Tool: "bash", Gates: []Gate{{gate, "hard", "deny"}}, Terminal: chain.OperationDeniedPayload{Disposition: "deny", GateID: &gate, ReasonCode: "policy.deny"}})
	closeRec := p.Close()
	recs := p.Records()
	f := &fixture{p: p, snap: snap, snapRaw: raw, recs: recs, jsonl: p.JSONL(), head: closeRec.Hash()}
	tc, _ := closeRec.Payload()
	closed := tc.(chain.TaskClosedPayload)
	openedAt, _ := chain.ParseTime(closed.OpenedAt)
	closedAt, _ := chain.ParseTime(closed.ClosedAt)
	iss := &certificate.Issuer{Store: p.Store, Snapshots: certificate.MapSnapshots{snap.PolicyID + " " + snap.Version: raw},
		Now: func() time.Time { return p.Clock.Now() }, NewID: p.IDs.Next}
	c, err := iss.Mint(context.Background(), certificate.Boundary{TaskBoundaryID: p.Boundary, ChainID: p.ChainID(),
		PolicyID: snap.PolicyID, PolicyVersion: snap.Version, OpenedAt: openedAt, ClosedAt: closedAt}, f.head)
	if err != nil {
		panic(err)
	}
	n := len(recs)
	incl := inclusionCase(f, 2, n, "", nil, 0)
	cons := consistencyCase(f, 4, n, "", nil, 0)
	return &Small{
		Chain: f.jsonl, Head: f.head, Snapshot: raw, Certificate: c, Signed: signCert(c, CertifierKey),
		Checkpoint: f.checkpoint(n, LogKey), OldCheckpt: f.checkpoint(4, LogKey), Consistency: cons.Files["consistency.proof"],
		Record: incl.Files["record.json"], Inclusion: incl.Files["proof.tlog-proof"], Trust: TrustFile(),
	}
}
