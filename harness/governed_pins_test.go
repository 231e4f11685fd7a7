package harness_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/harness"
	"polc.dev/polc/internal/diag"
)

// TestGovernedPlanGivesLandlockAndPins: a session file that names the
// in-process backend (or none, its default) still plans, but polc mcp is
// started with --backend landlock, so that a program the session's policy
// allows (python3 x.py) runs held by the kernel, never with polc's rights;
// and with --expect-snapshot the digest of the snapshot the plan read.
// The plan records the backend and pins the polc executable's hash, the
// session file's hash and the snapshot's digest.
func TestGovernedPlanGivesLandlockAndPins(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"", "backend: inprocess\n"} {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
		digest := writeSession(t, dir, "session.yaml", "out/gov.json", backend)
		s := specFrom(t, dir, governedCodexSrc)
		plan, _, err := harness.Compile(s, fakeProbe("codex", false))
		if err != nil {
			t.Fatal(err)
		}
		var args string
		for _, a := range plan.Argv {
			if v, ok := strings.CutPrefix(a, "mcp_servers.polc.args="); ok {
				args = v
			}
		}
		want := fmt.Sprintf(`["mcp",%q,"--workspace",%q,"--backend","landlock","--expect-snapshot",%q,`,
			filepath.Join(dir, "session.yaml"), filepath.Join(dir, "ws"), digest)
		if !strings.HasPrefix(args, want) {
			t.Errorf("session %q: polc mcp args %s, want them to start %s", backend, args, want)
		}
		g := plan.Governed
		exe, _ := os.Executable()
		exe, _ = filepath.EvalSymlinks(exe)
		if g.Backend != "landlock" || g.SnapshotDigest != digest || g.Snapshot != filepath.Join(dir, "out", "gov.json") ||
			g.PolcSHA256 != sha256File(t, exe) || g.SessionSHA256 != sha256File(t, filepath.Join(dir, "session.yaml")) {
			t.Errorf("session %q: the plan's governed member %+v does not pin backend landlock, snapshot %s, polc's and the session's hashes", backend, g, digest)
		}
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// governedDiags loads harness h of src in dir and returns the diagnostics
// of FromDeclaration (plan time) and of Check (polc vet).
func governedDiags(t *testing.T, dir, src string) (plan, vet diag.List) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "h.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	d, diags := compiler.Load(compiler.Config{Dir: dir}, []string{"h.cue"})
	if diags.HasErrors() {
		t.Fatalf("load: %v", diags)
	}
	h := d.LookupHarness("h")
	_, plan = harness.FromDeclaration(h, dir)
	return plan, harness.Check(h, dir)
}

// TestGovernedPlanRefusesWhatTheAgentCouldReach: a governed plan reads its
// session; what it trusts or records may not lie where the agent writes,
// as written or through a symbolic link (wslink -> ws); the session must
// be certifiable and readable. Each refusal is positioned at the governed
// field. polc vet reads no file, so it refuses the paths only.
func TestGovernedPlanRefusesWhatTheAgentCouldReach(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, setup, gov, want string
		// vet: polc vet refuses it too.
		vet bool
	}{
		{name: "evidence through a symlink", gov: `session: "session.yaml", evidence: "wslink/ev", cert: "cert.json"`,
			want: `governed.evidence "wslink/ev" lies in (or holds) the working dir or write root DIR/ws through a symbolic link`, vet: true},
		{name: "cert through a symlink", gov: `session: "session.yaml", evidence: "ev", cert: "wslink/c.json"`,
			want: `governed.cert "wslink/c.json" lies in (or holds) the working dir or write root DIR/ws through a symbolic link`, vet: true},
		{name: "sign key through a symlinked dir", setup: "keys->ws/keys", gov: `session: "session.yaml", evidence: "ev", cert: "cert.json", sign_key: "keys/k.key"`,
			want: `governed.sign_key "keys/k.key" lies in (or holds) the working dir or write root DIR/ws through a symbolic link`, vet: true},
		{name: "evidence holding the workspace's target", setup: "root", gov: `session: "session.yaml", evidence: "real", cert: "cert.json"`,
			want: `governed.evidence "real" lies in (or holds) the working dir or write root DIR/wsroot through a symbolic link`, vet: true},
		{name: "dangling symlink", setup: "evlink->ws/ev", gov: `session: "session.yaml", evidence: "evlink", cert: "cert.json"`,
			want: `governed.evidence "evlink" cannot be checked against the working dirs and write roots (DIR/evlink is a symbolic link to a missing target)`, vet: true},
		{name: "session in the workspace", gov: `session: "ws/session.yaml", evidence: "ev", cert: "cert.json"`,
			want: `governed.session "ws/session.yaml" lies in (or holds) the working dir or write root DIR/ws,`, vet: true},
		{name: "session through a symlink", gov: `session: "wslink/session.yaml", evidence: "ev", cert: "cert.json"`,
			want: `governed.session "wslink/session.yaml" lies in (or holds) the working dir or write root DIR/ws through a symbolic link`, vet: true},
		{name: "snapshot in the workspace", setup: "snapshot in ws", gov: `session: "session.yaml", evidence: "ev", cert: "cert.json"`,
			want: `the session's snapshot DIR/ws/gov.json lies in (or holds) the working dir or write root DIR/ws,`},
		{name: "snapshot in a write root", setup: "write root out", gov: `session: "session.yaml", evidence: "ev", cert: "cert.json"`,
			want: `the session's snapshot DIR/out/gov.json lies in (or holds) the working dir or write root DIR/out,`},
		{name: "server script in the workspace", setup: "server script in ws", gov: `session: "session.yaml", evidence: "ev", cert: "cert.json"`,
			want: `the session's MCP server file DIR/ws/srv.sh lies in (or holds) the working dir or write root DIR/ws,`},
		{name: "server program through a symlink", setup: "server program via wslink", gov: `session: "session.yaml", evidence: "ev", cert: "cert.json"`,
			want: `the session's MCP server file DIR/wslink/bin/srv lies in (or holds) the working dir or write root DIR/ws through a symbolic link`},
		{name: "governed profile", setup: "profile governed", gov: `session: "session.yaml", evidence: "ev", cert: "cert.json"`,
			want: `governed.session "session.yaml": profile "governed": a governed run ends in a certificate, so the session's profile must be certifiable`},
		{name: "missing session", gov: `session: "nosuch.yaml", evidence: "ev", cert: "cert.json"`,
			want: `io_error: harness "h": governed.session "nosuch.yaml": open DIR/nosuch.yaml: no such file or directory`},
		{name: "invalid session", setup: "bad session", gov: `session: "session.yaml", evidence: "ev", cert: "cert.json"`,
			want: `invalid_input: harness "h": governed.session "session.yaml": DIR/session.yaml:4:1: principal "agent": want kind:id`},
		{name: "session whose snapshot is missing", setup: "no snapshot", gov: `session: "session.yaml", evidence: "ev", cert: "cert.json"`,
			want: `io_error: harness "h": governed.session "session.yaml": its snapshot: open DIR/out/gov.json: no such file or directory`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
			os.Symlink(filepath.Join(dir, "ws"), filepath.Join(dir, "wslink"))
			snap, root, extra, write := "out/gov.json", "ws", "", ""
			switch c.setup {
			case "keys->ws/keys":
				os.MkdirAll(filepath.Join(dir, "ws", "keys"), 0o755)
				os.Symlink(filepath.Join(dir, "ws", "keys"), filepath.Join(dir, "keys"))
			case "evlink->ws/ev":
				os.Symlink(filepath.Join(dir, "ws", "ev"), filepath.Join(dir, "evlink"))
			case "root":
				os.MkdirAll(filepath.Join(dir, "real"), 0o755)
				os.Symlink(filepath.Join(dir, "real", "w"), filepath.Join(dir, "wsroot"))
				os.MkdirAll(filepath.Join(dir, "real", "w"), 0o755)
				root = "wsroot"
			case "snapshot in ws":
				snap = "ws/gov.json"
			case "write root out":
				write = `filesystem: write: ["out"]`
			case "profile governed":
				extra = "profile: governed\n"
			}
			writeSession(t, dir, "session.yaml", snap, "")
			switch c.setup {
			case "profile governed":
				b, _ := os.ReadFile(filepath.Join(dir, "session.yaml"))
				os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(strings.Replace(string(b), "profile: certifiable\n", extra, 1)), 0o644)
			case "bad session":
				b, _ := os.ReadFile(filepath.Join(dir, "session.yaml"))
				os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(strings.Replace(string(b), "agent:gov", "agent", 1)), 0o644)
			case "no snapshot":
				os.Remove(filepath.Join(dir, "out", "gov.json"))
			case "server script in ws":
				// Started in the workspace, as polc mcp starts it.
				os.WriteFile(filepath.Join(dir, "ws", "srv.sh"), []byte("exit 0\n"), 0o644)
				appendFile(t, filepath.Join(dir, "session.yaml"), "mcp_servers:\n  srv: {command: [/bin/sh, srv.sh]}\n")
			case "server program via wslink":
				os.MkdirAll(filepath.Join(dir, "ws", "bin"), 0o755)
				os.WriteFile(filepath.Join(dir, "ws", "bin", "srv"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
				appendFile(t, filepath.Join(dir, "session.yaml"), "mcp_servers:\n  srv: {command: [wslink/bin/srv]}\n")
			}
			if strings.HasPrefix(c.gov, `session: "ws/`) {
				os.Rename(filepath.Join(dir, "session.yaml"), filepath.Join(dir, "ws", "session.yaml"))
				os.WriteFile(filepath.Join(dir, "ws", "session.yaml"), []byte("snapshot: ../out/gov.json\nprofile: certifiable\nworkspace: .\nprincipal: agent:gov\ntenant: acme\n"), 0o644)
			}
			src := fmt.Sprintf("package h\nharnesses: h: {\n\tprovider: \"codex\"\n\tworkspace: root: %q\n\t%s\n\tgoverned: {%s}\n}\n", root, write, c.gov)
			plan, vet := governedDiags(t, dir, src)
			want := strings.ReplaceAll(c.want, "DIR", dir)
			line := 6
			if !slices.ContainsFunc(plan, func(d *diag.Diagnostic) bool {
				return strings.Contains(d.Error(), want) && d.Pos.Line == line
			}) {
				t.Errorf("plan: want an error at h.cue:%d containing %q, got:\n%v", line, want, plan)
			}
			refused := slices.ContainsFunc(vet, func(d *diag.Diagnostic) bool { return strings.Contains(d.Error(), want) })
			if refused != c.vet {
				t.Errorf("vet refuses it: %v, want %v:\n%v", refused, c.vet, vet)
			}
		})
	}
}

func appendFile(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

// TestGovernedSpawnRefusesChangedServerFile: the plan pins the hash of
// each file the session's MCP servers run (the program, and the script
// its arguments name); a script changed after the plan refuses the run
// before the provider starts.
func TestGovernedSpawnRefusesChangedServerFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
	os.MkdirAll(filepath.Join(dir, "srv"), 0o755)
	srv := filepath.Join(dir, "srv", "srv.sh")
	os.WriteFile(srv, []byte("exit 0\n"), 0o644)
	writeSession(t, dir, "session.yaml", "out/gov.json", fmt.Sprintf("mcp_servers:\n  srv: {command: [/bin/sh, %q]}\n", srv))
	script := markerScript(t, dir)
	plan := governedCodexPlan(t, dir, script, governedCodexSrc)
	if got := plan.Governed.ServerFiles; got[srv] != sha256File(t, srv) || got["/bin/sh"] != sha256File(t, "/bin/sh") || len(got) != 2 {
		t.Fatalf("the plan pins the server files %v, want /bin/sh and %s", got, srv)
	}
	os.WriteFile(srv, []byte("cat /etc/passwd\n"), 0o644)
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "hi", Getenv: fixedEnv})
	if want := "the session's MCP server file " + srv + " changed since the plan was made"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("spawn: %v (result %+v), want an error containing %q", err, res, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
		t.Fatal("the provider started")
	}
}

// TestGovernedPlanWithoutSessionReader: a program that did not set
// harness.InspectSession (not polc) cannot plan a governed harness: the
// session would go unread, its profile and snapshot unchecked.
func TestGovernedPlanWithoutSessionReader(t *testing.T) {
	// Not parallel: it replaces a package variable.
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
	writeSession(t, dir, "session.yaml", "out/gov.json", "")
	old := harness.InspectSession
	harness.InspectSession = nil
	defer func() { harness.InspectSession = old }()
	plan, _ := governedDiags(t, dir, governedCodexSrc)
	if !plan.HasErrors() || !strings.Contains(plan.Error(), "harness.InspectSession is not set") {
		t.Fatalf("a governed spec planned without reading its session: %v", plan)
	}
}

// markerScript is a fake codex that leaves dir/started when it runs.
func markerScript(t *testing.T, dir string) string {
	t.Helper()
	script := filepath.Join(dir, "codex")
	os.WriteFile(script, []byte("#!/bin/sh\ntouch '"+filepath.Join(dir, "started")+"'\necho '{\"type\":\"thread.started\",\"thread_id\":\"t\"}'\n"), 0o755)
	return script
}

// TestGovernedSpawnRefusesWhatChangedSincePlan: Spawn checks the plan's
// pins before the provider starts: a certificate already at the cert path
// (an earlier run's, which the old Spawn reported as this run's when the
// session wrote none), a snapshot swapped for another policy, a session
// file edited, a polc executable replaced. Each refuses the run, which does
// not start.
func TestGovernedSpawnRefusesWhatChangedSincePlan(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		change func(t *testing.T, dir string, plan *harness.Plan)
		want   string
	}{
		{"stale certificate", func(t *testing.T, dir string, plan *harness.Plan) {
			os.WriteFile(filepath.Join(dir, "cert.json"), []byte(`{"certificate_id":"from-an-earlier-run"}`), 0o644)
		}, "a file is already at the certificate path"},
		{"stale certificate symlink", func(t *testing.T, dir string, plan *harness.Plan) {
			os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "cert.json"))
		}, "a file is already at the certificate path"},
		{"snapshot swapped", func(t *testing.T, dir string, plan *harness.Plan) {
			os.WriteFile(filepath.Join(dir, "policy2.cue"), []byte(strings.Replace(governedPolicy, `"touch allowed*"`, `"touch allowed*", "python3 *"`, 1)), 0o644)
			runPolc(t, dir, "compile", "policy2.cue", "-o", "out2")
			os.Rename(filepath.Join(dir, "out2", "snapshots", "gov.json"), filepath.Join(dir, "out", "gov.json"))
		}, "the session's snapshot " + "DIR/out/gov.json is not the one planned (digest "},
		{"session edited", func(t *testing.T, dir string, plan *harness.Plan) {
			f, _ := os.OpenFile(filepath.Join(dir, "session.yaml"), os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString("backend: inprocess\n")
			f.Close()
		}, "the session file DIR/session.yaml changed since the plan was made"},
		{"polc replaced", func(t *testing.T, dir string, plan *harness.Plan) {
			// The plan names a copy of polc; the copy is replaced after
			// the plan (resealed: the plan itself is as compiled).
			cp := filepath.Join(dir, "polc")
			exe, _ := os.Executable()
			b, _ := os.ReadFile(exe)
			os.WriteFile(cp, b, 0o755)
			plan.Governed.Polc, plan.Governed.PolcSHA256 = cp, sha256File(t, cp)
			if err := plan.Seal(); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(cp, []byte("#!/bin/sh\ncat /etc/passwd\n"), 0o755)
		}, "the polc executable DIR/polc is not the one planned (sha256 "},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
			digest := writeSession(t, dir, "session.yaml", "out/gov.json", "")
			script := markerScript(t, dir)
			plan := governedCodexPlan(t, dir, script, governedCodexSrc)
			c.change(t, dir, plan)
			// Were the run to start, its session would write a good
			// certificate: only the pins can refuse it.
			_ = digest
			res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "hi", Getenv: fixedEnv})
			if want := strings.ReplaceAll(c.want, "DIR", dir); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("spawn: %v (result %+v), want an error containing %q", err, res, want)
			}
			if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
				t.Fatal("the provider started")
			}
		})
	}
}

// TestGovernedSpawnChecksTheCertificate: the certificate found after a
// governed run must be one of the planned snapshot, signed when the plan
// has a sign key; anything else at the path fails the run.
func TestGovernedSpawnChecksTheCertificate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, signKey string
		cert          func(t *testing.T, digest string) []byte
		want          string
	}{
		{"not a certificate", "", func(*testing.T, string) []byte { return []byte("{}\n") }, "certificate: "},
		{"another policy's", "", func(t *testing.T, _ string) []byte { return fakeCertificate(t, strings.Repeat("0", 64)) },
			"is of policy digest " + strings.Repeat("0", 64) + ", not of the planned snapshot"},
		{"unsigned though a key is planned", `, sign_key: "keys/k.key"`, fakeCertificate, "is not a signed certificate"},
		{"this policy's", "", fakeCertificate, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
			digest := writeSession(t, dir, "session.yaml", "out/gov.json", "")
			made := filepath.Join(dir, "made.json")
			os.WriteFile(made, c.cert(t, digest), 0o644)
			script := filepath.Join(dir, "codex")
			os.WriteFile(script, []byte("#!/bin/sh\ncp '"+made+"' '"+filepath.Join(dir, "cert.json")+"'\necho '{\"type\":\"thread.started\",\"thread_id\":\"t\"}'\n"), 0o755)
			plan := governedCodexPlan(t, dir, script, strings.Replace(governedCodexSrc, `cert: "cert.json"`, `cert: "cert.json"`+c.signKey, 1))
			res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "hi", Getenv: fixedEnv})
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("spawn: %v", err)
			case c.want == "" && res.Certificate != filepath.Join(dir, "cert.json"):
				t.Fatalf("certificate %q", res.Certificate)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("spawn: %v, want an error containing %q", err, c.want)
			}
		})
	}
}
