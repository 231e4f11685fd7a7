package chain_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
	"polc.dev/polc/internal/jcs"
)

// fastOK is the fast verifier's notion of a valid chain.
func fastOK(t testing.TB, data []byte, head string) bool {
	opts := chain.VerifyOptions{}
	if head != "" {
		h, err := chain.ParseHash(head)
		if err != nil {
			t.Fatal(err)
		}
		opts.ExpectedHead = &h
	}
	res, err := chain.Verify(bytes.NewReader(data), opts)
	if err != nil {
		t.Fatal(err)
	}
	return res.OK()
}

// TestReferenceAgreesOnCorpus runs both verifiers on every chain of the
// mutation corpus and on the standard fixtures.
func TestReferenceAgreesOnCorpus(t *testing.T) {
	files, _ := filepath.Glob("../testdata/evidence/*/chain.jsonl")
	if len(files) < 40 {
		t.Fatalf("only %d corpus chains", len(files))
	}
	valid, invalid := 0, 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ref, why := refVerify(data, "")
		if got := fastOK(t, data, ""); got != ref {
			t.Errorf("%s: fast verifier says %v, reference %v (%s)", f, got, ref, why)
		}
		if ref {
			valid++
		} else {
			invalid++
		}
	}
	if valid == 0 || invalid == 0 {
		t.Fatalf("corpus not discriminating: %d valid, %d invalid", valid, invalid)
	}
}

func smallChain() (data []byte, head string) {
	s := evidencegen.NewSmall()
	return s.Chain, s.Head.String()
}

// TestCanonicalEncoderMatchesJCS checks the hand-written record encoder
// against the general canonicalizer.
func TestCanonicalEncoderMatchesJCS(t *testing.T) {
	data, _ := smallChain()
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		r, err := chain.ParseRecord(line)
		if err != nil {
			t.Fatal(err)
		}
		viaJCS, err := jcs.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(viaJCS, r.Canonical()) || !bytes.Equal(viaJCS, line) {
			t.Fatalf("encoder disagrees with jcs:\n%s\n%s", r.Canonical(), viaJCS)
		}
		if !jcs.IsCanonical([]byte(r.PayloadJSON)) {
			t.Fatalf("payload not canonical: %s", r.PayloadJSON)
		}
	}
}

// FuzzVerifyChain mutates a valid chain. Both verifiers must agree, and
// with the original head pinned a mutant never verifies.
func FuzzVerifyChain(f *testing.F) {
	data, head := smallChain()
	f.Add(data)
	f.Add(bytes.Replace(data, []byte(`"sequence":3`), []byte(`"sequence":4`), 1))
	f.Add(data[:len(data)-1])
	f.Add(append(append([]byte(nil), data...), data[:200]...))
	f.Add(bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n")))
	f.Add(bytes.Replace(data, []byte(`":"`), []byte("\":\"\xff"), 1)) // not UTF-8
	f.Fuzz(func(t *testing.T, mutant []byte) {
		ref, why := refVerify(mutant, "")
		if got := fastOK(t, mutant, ""); got != ref {
			t.Fatalf("fast verifier says %v, reference %v (%s)", got, ref, why)
		}
		if fastOK(t, mutant, head) && !bytes.Equal(mutant, data) {
			t.Fatalf("a mutant verifies against the original head")
		}
	})
}

// FuzzParseRecord: no panic; an accepted record re-encodes to the same
// bytes and the reference accepts it too.
func FuzzParseRecord(f *testing.F) {
	data, _ := smallChain()
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		f.Add(line)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"chain_hash":"`))
	f.Add([]byte("{\"chain_hash\":\"\xed\xa0\x80\"}")) // not UTF-8
	f.Add([]byte(`{"chain_hash":"\udcff"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := chain.ParseRecord(line)
		_, referr := refParse(line)
		if (err == nil) != (referr == nil) {
			t.Fatalf("ParseRecord: %v, reference: %v", err, referr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(r.Canonical(), line) {
			t.Fatalf("re-encoding differs:\n%s\n%s", r.Canonical(), line)
		}
		if _, err := r.Payload(); err != nil {
			t.Fatalf("accepted record's payload does not decode: %v", err)
		}
	})
}

// FuzzOpenCheckpoint: no panic; nothing but the original body ever carries
// a verified signature by the trusted log key.
func FuzzOpenCheckpoint(f *testing.F) {
	s := evidencegen.NewSmall()
	trust, err := chain.ParseTrust(s.Trust)
	if err != nil {
		f.Fatal(err)
	}
	orig, err := chain.OpenCheckpoint(s.Checkpoint, trust)
	if err != nil || !orig.Anchored() {
		f.Fatalf("seed checkpoint does not verify: %v", err)
	}
	f.Add(s.Checkpoint)
	f.Add(s.OldCheckpt)
	f.Add([]byte("polc.dev/chain/x\n1\nAAAA\n\n— a b\n"))
	f.Add([]byte("polc.dev/chain/x\xff\n1\nAAAA\n\n\xe2\x80 a b\n")) // not UTF-8
	f.Fuzz(func(t *testing.T, msg []byte) {
		sn, err := chain.OpenCheckpoint(msg, trust)
		if err != nil {
			return
		}
		if got := sn.Checkpoint.Body(); got != sn.Text {
			t.Fatalf("body does not round-trip: %q vs %q", got, sn.Text)
		}
		if sn.Anchored() && sn.Text != orig.Text && sn.Text != mustOpen(t, s.OldCheckpt, trust) {
			t.Fatalf("forged checkpoint verifies: %q", sn.Text)
		}
	})
}

func mustOpen(t *testing.T, msg []byte, trust *chain.Trust) string {
	sn, err := chain.OpenCheckpoint(msg, trust)
	if err != nil {
		t.Fatal(err)
	}
	return sn.Text
}

// FuzzParseTrust: no panic, and accepted files list at least one key.
func FuzzParseTrust(f *testing.F) {
	f.Add(evidencegen.TrustFile())
	f.Add([]byte("log a+00000000+AQ== valid_from=2026-01-01T00:00:00Z\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := chain.ParseTrust(b)
		if err == nil && len(tr.Keys) == 0 {
			t.Fatal("accepted a trust file without keys")
		}
	})
}

// TestInteropPythonChain verifies a chain written by an independent Python
// producer (testdata/scripts/certverify_interop_python.txtar holds it).
func TestInteropPythonChain(t *testing.T) {
	data, err := os.ReadFile("../testdata/interop/python-chain.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	head, _ := os.ReadFile("../testdata/interop/python-chain.head")
	h := string(bytes.TrimSpace(head))
	if !fastOK(t, data, h) {
		t.Fatal("the Python producer's chain does not verify")
	}
	if ok, why := refVerify(data, h); !ok {
		t.Fatalf("reference verifier rejects it: %s", why)
	}
}
