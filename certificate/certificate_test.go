package certificate_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
	"polc.dev/polc/snapshot"
)

type world struct {
	p        *evidencegen.Producer
	snap     *snapshot.Snapshot
	raw      []byte
	issuer   *certificate.Issuer
	boundary certificate.Boundary
}

func newWorld(t *testing.T, seed string, build func(p *evidencegen.Producer)) *world {
	t.Helper()
	snap, raw := evidencegen.Snapshot("mint", "3.1.0", evidencegen.NewIDs("mint snapshot "+seed))
	p := evidencegen.NewProducer(seed, snap)
	build(p)
	w := &world{p: p, snap: snap, raw: raw}
	w.issuer = &certificate.Issuer{
		Store:     p.Store,
		Snapshots: certificate.MapSnapshots{snap.PolicyID + " " + snap.Version: raw},
		Now:       func() time.Time { return time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC) },
		NewID:     p.IDs.Next,
	}
	w.boundary = certificate.Boundary{TaskBoundaryID: p.Boundary, ChainID: p.ChainID(), PolicyID: snap.PolicyID,
		PolicyVersion: snap.Version, OpenedAt: p.OpenedAt}
	if last := p.Last(); last != nil && last.RecordType == chain.TaskClosed {
		pl, _ := last.Payload()
		w.boundary.ClosedAt, _ = chain.ParseTime(pl.(chain.TaskClosedPayload).ClosedAt)
	}
	return w
}

func (w *world) head() chain.Hash { return w.p.Last().Hash() }

func okTerm() chain.Payload {
	return chain.CallableCompletedPayload{DurationUS: 5, ResultDigest: evidencegen.Digest("r")}
}

func TestMintDerivesEverything(t *testing.T) {
	w := newWorld(t, "mint ok", func(p *evidencegen.Producer) { p.Standard(true); p.Close() })
	c, err := w.issuer.Mint(context.Background(), w.boundary, w.head())
	if err != nil {
		t.Fatal(err)
	}
	want := certificate.GateSummary{HardAllow: 3, HardDeny: 1, SoftAllow: 1, SoftDeny: 2, AdvisoryDeny: 1, ExceptionCount: 1}
	if c.GateSummary != want || c.ProcessGrade != certificate.GradeDegraded {
		t.Fatalf("summary %+v grade %s, want %+v DEGRADED", c.GateSummary, c.ProcessGrade, want)
	}
	recs := w.p.Records()
	if c.TreeSize != int64(len(recs)) || c.EvidenceChainHead != w.head().String() || c.PolicyDigest != w.snap.Digest {
		t.Fatalf("certificate %+v", c)
	}
	hashes := make([]chain.Hash, len(recs))
	for i, r := range recs {
		hashes[i] = r.Hash()
	}
	root, _ := chain.NewTree(hashes).Root(uint64(len(recs)))
	if c.MerkleRoot != base64.StdEncoding.EncodeToString(root[:]) {
		t.Fatal("merkle_root is not the RFC 6962 root")
	}
	b, _ := c.Marshal()
	back, err := certificate.Parse(append(b, '\n'))
	if err != nil || *back != *c {
		t.Fatalf("round trip: %v", err)
	}
	// and it verifies against its chain
	rep, err := certificate.Verify(certificate.VerifyInput{Certificate: b, Chain: bytes.NewReader(w.p.JSONL()), Snapshot: w.raw, ExpectedHead: ptr(w.head())})
	if err != nil || !rep.Anchored || len(rep.Findings) != 0 {
		t.Fatalf("verify: %+v %v", rep.Findings, err)
	}
}

func ptr(h chain.Hash) *chain.Hash { return &h }

func TestMintRefusals(t *testing.T) {
	cases := []struct {
		name  string
		build func(p *evidencegen.Producer)
		edit  func(w *world) chain.Hash
		rule  certificate.Rule
		code  chain.Code
	}{
		{"closed before opened", func(p *evidencegen.Producer) { p.Run(evidencegen.Op{Tool: "a", Terminal: okTerm()}); p.Close() },
			func(w *world) chain.Hash {
				w.boundary.ClosedAt = w.boundary.OpenedAt.Add(-time.Second)
				return w.head()
			},
			certificate.RuleClosedAfterOpened, ""},
		{"clock before the close", func(p *evidencegen.Producer) { p.Run(evidencegen.Op{Tool: "a", Terminal: okTerm()}); p.Close() },
			func(w *world) chain.Hash {
				closed := w.boundary.ClosedAt
				w.issuer.Now = func() time.Time { return closed.Add(-time.Microsecond) }
				return w.head()
			},
			certificate.RuleClosedAfterOpened, chain.CodeMintedBeforeClose},
		{"not closed", func(p *evidencegen.Producer) { p.Run(evidencegen.Op{Tool: "a", Terminal: okTerm()}) },
			nil, certificate.RuleClosedAtHead, chain.CodeTaskNotClosed},
		{"expected head is not task_closed", func(p *evidencegen.Producer) { p.Run(evidencegen.Op{Tool: "a", Terminal: okTerm()}); p.Close() },
			func(w *world) chain.Hash { return w.p.Records()[1].Hash() }, certificate.RuleClosedAtHead, chain.CodeHeadMismatch},
		{"other boundary", func(p *evidencegen.Producer) { p.Run(evidencegen.Op{Tool: "a", Terminal: okTerm()}); p.Close() },
			func(w *world) chain.Hash { w.boundary.TaskBoundaryID = w.p.IDs.Next(); return w.head() },
			certificate.RuleClosedAtHead, chain.CodeBoundaryMismatch},
		{"missing terminal", func(p *evidencegen.Producer) { p.Start("a"); p.Close() },
			nil, certificate.RuleOneTerminal, chain.CodeMissingTerminal},
		{"duplicate terminal", func(p *evidencegen.Producer) {
			op := p.Run(evidencegen.Op{Tool: "a", Terminal: okTerm()})
			p.Append(op, okTerm())
			p.Close()
		}, nil, certificate.RuleOneTerminal, chain.CodeDuplicateTerminal},
		{"gate not enforced", func(p *evidencegen.Producer) {
			p.Run(evidencegen.Op{Tool: "a", Gates: []evidencegen.Gate{{ID: "g", Level: "hard", Decision: "deny"}}, Terminal: okTerm()})
			p.Close()
		}, nil, certificate.RuleChainVerifies, chain.CodeGateNotEnforced},
		{"missing snapshot", func(p *evidencegen.Producer) { p.Run(evidencegen.Op{Tool: "a", Terminal: okTerm()}); p.Close() },
			func(w *world) chain.Hash { w.issuer.Snapshots = certificate.MapSnapshots{}; return w.head() },
			certificate.RuleMissingPolicy, ""},
		{"snapshot digest differs", func(p *evidencegen.Producer) { p.Run(evidencegen.Op{Tool: "a", Terminal: okTerm()}); p.Close() },
			func(w *world) chain.Hash {
				s := *w.snap
				s.Description = "changed"
				s.Seal()
				b, _ := s.Marshal()
				w.issuer.Snapshots = certificate.MapSnapshots{s.PolicyID + " " + s.Version: b}
				return w.head()
			}, certificate.RuleMissingPolicy, chain.CodePolicyMismatch},
		// Nothing pins the policy: a certificate could name any.
		{"no operation", func(p *evidencegen.Producer) { p.Close() }, nil, certificate.RuleMissingPolicy, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, "refuse "+tc.name, tc.build)
			head := w.head()
			if tc.edit != nil {
				head = tc.edit(w)
			}
			if w.boundary.ClosedAt.IsZero() {
				w.boundary.ClosedAt = w.boundary.OpenedAt.Add(time.Second)
			}
			c, err := w.issuer.Mint(context.Background(), w.boundary, head)
			var re *certificate.RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("minted %+v (err %v), want a refusal", c, err)
			}
			if re.Rule != tc.rule || re.Code != tc.code {
				t.Fatalf("refused by %s/%s (%v), want %s/%s", re.Rule, re.Code, err, tc.rule, tc.code)
			}
		})
	}
}

// TestPAEVector is the DSSE specification's example.
func TestPAEVector(t *testing.T) {
	got := string(certificate.PAE("http://example.com/HelloWorld", []byte("hello world")))
	if want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"; got != want {
		t.Fatalf("PAE %q, want %q", got, want)
	}
}

func TestEnvelopeSignatures(t *testing.T) {
	w := newWorld(t, "dsse", func(p *evidencegen.Producer) { p.Run(evidencegen.Op{Tool: "a", Terminal: okTerm()}); p.Close() })
	c, err := w.issuer.Mint(context.Background(), w.boundary, w.head())
	if err != nil {
		t.Fatal(err)
	}
	trust, _ := chain.ParseTrust(evidencegen.TrustFile())
	env, err := certificate.Sign(c, evidencegen.CertifierKey.Signer, evidencegen.CertifierKey.Signer)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := certificate.OpenEnvelope(env, trust)
	if err != nil || len(sc.Signers) != 1 || len(sc.Findings) != 0 {
		t.Fatalf("a key signing twice must count once: %+v %v", sc, err)
	}
	// URL-safe base64 is accepted, as DSSE requires of verifiers.
	var e certificate.Envelope
	json.Unmarshal(env, &e)
	toURL := func(s string) string {
		b, _ := base64.StdEncoding.DecodeString(s)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	e.Payload = toURL(e.Payload)
	for i := range e.Signatures {
		e.Signatures[i].Sig = toURL(e.Signatures[i].Sig)
	}
	urlSafe, _ := json.Marshal(e)
	if sc, err := certificate.OpenEnvelope(urlSafe, trust); err != nil || len(sc.Signers) != 1 {
		t.Fatalf("url-safe envelope: %+v %v", sc, err)
	}
	// No keyid: verification still finds the key.
	noKeyID := bytes.Replace(env, []byte(`"keyid":"`), []byte(`"keyid":"x`), -1)
	if sc, err := certificate.OpenEnvelope(noKeyID, trust); err != nil || len(sc.Signers) != 1 {
		t.Fatalf("unknown keyid hint: %+v %v", sc, err)
	}
	for _, bad := range []string{`{}`, `{"payload":"","payloadType":"x","signatures":[]}`, `{"payload":1,"payloadType":"x","signatures":[{"sig":"AA=="}]}`,
		`{"payload":"","payloadType":"x","signatures":[{"sig":"AA=="}],"extra":1}`, `{"payload":"","payload":"","payloadType":"x","signatures":[{"sig":"AA=="}]}`} {
		if _, err := certificate.OpenEnvelope([]byte(bad), trust); err == nil {
			t.Errorf("accepted envelope %s", bad)
		}
	}
}

func TestParseRejects(t *testing.T) {
	w := newWorld(t, "parse", func(p *evidencegen.Producer) { p.Run(evidencegen.Op{Tool: "a", Terminal: okTerm()}); p.Close() })
	c, _ := w.issuer.Mint(context.Background(), w.boundary, w.head())
	good, _ := c.Marshal()
	for name, b := range map[string]string{
		"extra member":  strings.Replace(string(good), `"chain_id"`, `"x":1,"chain_id"`, 1),
		"bad grade":     strings.Replace(string(good), `"FULL"`, `"GOOD"`, 1),
		"whitespace":    strings.Replace(string(good), `,`, `, `, 1),
		"two newlines":  string(good) + "\n\n",
		"negative size": strings.Replace(string(good), `"tree_size":`, `"tree_size":-`, 1),
	} {
		if _, err := certificate.Parse([]byte(b)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzCertificate: parsing certificates and envelopes never panics, and an
// accepted certificate re-encodes to the same bytes.
func FuzzCertificate(f *testing.F) {
	s := evidencegen.NewSmall()
	b, _ := s.Certificate.Marshal()
	f.Add(b)
	f.Add(s.Signed)
	f.Add(bytes.Replace(b, []byte(`":"`), []byte("\":\"\xff"), 1)) // not UTF-8
	trust, _ := chain.ParseTrust(s.Trust)
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := certificate.Parse(data); err == nil {
			out, _ := c.Marshal()
			if !bytes.Equal(out, bytes.TrimSuffix(data, []byte("\n"))) {
				t.Fatal("accepted certificate does not re-encode identically")
			}
		}
		certificate.OpenEnvelope(data, trust)
		certificate.Verify(certificate.VerifyInput{Certificate: data, Chain: bytes.NewReader(s.Chain), Trust: trust})
	})
}
