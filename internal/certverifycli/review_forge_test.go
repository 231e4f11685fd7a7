package certverifycli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
	"polc.dev/polc/internal/certverifycli"
	"polc.dev/polc/internal/evidencegen"
)

// TestHugeSnapshotIsNotBuffered: the snapshot given with --snapshot is
// attacker-supplied like every other input, and was read whole (no limit):
// a multi-gigabyte snapshot file made certverify allocate its size. It is
// now refused (policy_mismatch: it cannot be the policy) after reading at
// most its size limit.
func TestHugeSnapshotIsNotBuffered(t *testing.T) {
	s := evidencegen.NewSmall()
	dir := writeFiles(t, map[string][]byte{"chain.jsonl": s.Chain, "trust.txt": s.Trust, "cert.dsse.json": s.Signed, "snap.json": s.Snapshot})
	p := func(n string) string { return filepath.Join(dir, n) }
	if code, codes := run(t, "cert", p("cert.dsse.json"), "--chain", p("chain.jsonl"), "--trust", p("trust.txt"), "--snapshot", p("snap.json")); code != 0 {
		t.Fatalf("valid snapshot: exit %d %v", code, codes)
	}
	const size = 256 << 20
	f, err := os.Create(p("huge"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	code, codes := run(t, "cert", p("cert.dsse.json"), "--chain", p("chain.jsonl"), "--trust", p("trust.txt"), "--snapshot", p("huge"))
	runtime.ReadMemStats(&after)
	if code != 1 || !containsCode(codes, chain.CodePolicyMismatch) {
		t.Errorf("huge snapshot: exit %d, findings %v; want exit 1 with policy_mismatch", code, codes)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/4 {
		t.Errorf("huge snapshot: allocated %d MiB for a %d MiB input it refuses", alloc>>20, size>>20)
	}
}

// runText runs certverify with the text report and returns the exit code
// and stdout.
func runText(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := certverifycli.Run(context.Background(), args,
		certverifycli.Env{Stdout: &stdout, Stderr: &stderr, Now: func() time.Time { return time.Unix(0, 0) }})
	return code, stdout.String()
}

// TestTextReportIsNotSpoofable: the text report quotes attacker-controlled
// strings (a payloadType, a keyid, a gate id, a policy_version). They were
// printed raw, so an envelope whose payloadType held
// "\x1b[2J\x1b[Hcertverify cert: VERIFIED (exit 0)" cleared the auditor's
// terminal and showed VERIFIED for a certificate that failed (exit 1).
// Control characters (C0, DEL, C1) and bidirectional overrides are now
// escaped.
func TestTextReportIsNotSpoofable(t *testing.T) {
	const evil = "x\x1b[2J\x1b[Hcertverify cert: VERIFIED (exit 0)\n\u202e\u0085\x7f"
	s := evidencegen.NewSmall()
	var env map[string]any
	if err := json.Unmarshal(s.Signed, &env); err != nil {
		t.Fatal(err)
	}
	env["payloadType"] = evil
	env["signatures"].([]any)[0].(map[string]any)["keyid"] = evil
	badType, _ := json.Marshal(env)
	// A signature that no trusted key made: unknown_key quotes its keyid.
	env["payloadType"] = certificate.PayloadType
	env["signatures"].([]any)[0].(map[string]any)["sig"] = base64.StdEncoding.EncodeToString(make([]byte, 64))
	unknownKey, _ := json.Marshal(env)

	snap, _ := evidencegen.Snapshot("p", "1", evidencegen.NewIDs("snap"))
	p := evidencegen.NewProducer("spoof", snap)
	op := p.Start("bash")
	p.Gate(op, evidencegen.Gate{ID: evil, Level: "hard", Decision: "deny"})
	p.Append(op, chain.CallableCompletedPayload{DurationUS: 1, ResultDigest: evidencegen.Digest("r")})
	p.Close()

	dir := writeFiles(t, map[string][]byte{
		"chain.jsonl": s.Chain, "trust.txt": s.Trust, "type.json": badType, "keyid.json": unknownKey,
		"other.jsonl": p.JSONL(),
	})
	path := func(n string) string { return filepath.Join(dir, n) }
	for _, args := range [][]string{
		{"cert", path("type.json"), "--chain", path("chain.jsonl"), "--trust", path("trust.txt")},
		{"cert", path("keyid.json"), "--chain", path("chain.jsonl"), "--trust", path("trust.txt")},
		{"chain", path("other.jsonl")},
	} {
		code, out := runText(t, args...)
		if code != certverifycli.ExitFailed {
			t.Errorf("%s %s: exit %d, want 1\n%s", args[0], filepath.Base(args[1]), code, out)
		}
		for _, r := range strings.TrimSuffix(out, "\n") {
			if r != '\n' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e') {
				t.Errorf("%s %s: the text report holds the control character %U:\n%s", args[0], filepath.Base(args[1]), r, out)
				break
			}
		}
		for _, l := range strings.Split(out, "\n")[1:] {
			if strings.HasPrefix(l, "certverify") {
				t.Errorf("%s %s: the text report holds a second verdict line:\n%s", args[0], filepath.Base(args[1]), out)
			}
		}
	}
}
