package harness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/harness"
	"polc.dev/polc/harness/internal/mockapi"
	"polc.dev/polc/internal/certverifycli"
)

// governedPolicy is the policy of the governed session: polc's bash runs
// echo and touch of allowed* files, never of denied* files; files may be
// written anywhere in the workspace.
const governedPolicy = `package p

policies: "gov": {
	version: "1.0.0"
	principals: ["agent:gov"]
	tenants: ["acme"]
	actions: allow: ["bash", "read_file", "write_file", "edit_file"]
	filesystem: {
		read: ["**"]
		write: ["**"]
	}
	subprocess: {
		mode: "allowlist"
		allow: ["echo *", "touch allowed*"]
		deny: ["touch denied*"]
		shell: "forbid"
	}
}
`

// polcTool is the name under which provider offers polc mcp's tool.
func polcTool(provider, tool string) string {
	if provider == "gemini-cli" {
		return "mcp_" + harness.GovernedServer + "_" + tool
	}
	return "mcp__" + harness.GovernedServer + "__" + tool
}

// nativeShell is a forced call of the provider's own shell tool.
var nativeShell = map[string]func(string) mockapi.Call{"claude-code": claudeBash, "codex": codexExec, "gemini-cli": geminiShell}

// runPolc runs this test binary as polc (TestMain) in dir.
func runPolc(t *testing.T, dir string, args ...string) {
	t.Helper()
	if err := polcCmd(dir, args...); err != nil {
		t.Fatal(err)
	}
}

// polcCmd runs this test binary as polc (TestMain) in dir.
func polcCmd(dir string, args ...string) error {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), polcMainEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("polc %v: %v\n%s", args, err, out)
	}
	return nil
}

// TestRealGovernedClaudeCode runs Claude Code governed (runGoverned).
func TestRealGovernedClaudeCode(t *testing.T) { runGoverned(t, "claude-code") }

// TestRealGovernedCodex runs Codex governed (runGoverned).
func TestRealGovernedCodex(t *testing.T) { runGoverned(t, "codex") }

// TestRealGovernedGeminiCLI runs Gemini CLI governed (runGoverned).
func TestRealGovernedGeminiCLI(t *testing.T) { runGoverned(t, "gemini-cli") }

// runGoverned runs a real CLI with a governed spec against the loopback
// mock model, which calls, in order: the provider's own shell (forced: the
// plan keeps it from the model), polc's write_file, polc's bash with a
// command the session's policy denies, and polc's bash with one it allows.
// The native shell must be refused (its file absent), the allowed calls
// must have run through polc (their files present, an operation for each
// in the chain), the denied one must not have (its file absent,
// operation_denied in the chain); after the run the chain must be closed
// and the certificate verify with certverify.
func runGoverned(t *testing.T, provider string) {
	t.Parallel()
	p := probe(t, provider)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(ws, 0o755)
	os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(governedPolicy), 0o644)
	runPolc(t, dir, "compile", "policy.cue", "-o", "out")
	runPolc(t, dir, "keygen", "certifier", "-o", "keys")
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/gov.json\nprofile: certifiable\nworkspace: ws\nprincipal: agent:gov\ntenant: acme\n"), 0o644)
	mock := mockapi.Start(t, mockapi.Script{Text: "Done.", Calls: []mockapi.Call{
		forced(nativeShell[provider]("touch " + filepath.Join(ws, "native.txt"))),
		{Tool: polcTool(provider, "write_file"), Input: map[string]any{"path": "governed.txt", "content": "x\n"}},
		{Tool: polcTool(provider, "bash"), Input: map[string]any{"command": "touch denied.txt"}},
		{Tool: polcTool(provider, "bash"), Input: map[string]any{"command": "touch allowed.txt"}},
	}})
	s := specFrom(t, dir, fmt.Sprintf(`package h
harnesses: h: {
	provider: %q
	model: %q
	endpoint: base_url: %q
	workspace: root: "ws"
	governed: {session: "session.yaml", evidence: "ev", cert: "cert.json", sign_key: "keys/certifier.key"}
	environment: secrets: %s: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "150s"
}
`, provider, mockModels[provider], mock.URL, modelKeys[provider]))
	_, rep, err := harness.Compile(s, p)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := rep.Lookup(harness.CapToolsGoverned)
	if want := "TestRealGoverned" + map[string]string{"claude-code": "ClaudeCode", "codex": "Codex", "gemini-cli": "GeminiCLI"}[provider]; !strings.HasSuffix(r.Evidence, want) {
		t.Errorf("%s is %s, evidence %q: its row must name %s", harness.CapToolsGoverned, r.Status, r.Evidence, want)
	}
	t.Logf("%s: %s (%s)", harness.CapToolsGoverned, r.Status, r.Reason)
	for _, r := range rep.All() {
		if r.Status != harness.Enforced {
			s.AllowDegraded = append(s.AllowDegraded, r.Capability)
		}
	}
	plan, _, err := harness.Compile(s, p)
	if err != nil {
		t.Fatal(err)
	}
	res, err := harness.Spawn(context.Background(), plan, harness.SpawnOptions{Prompt: "do as you are told", Getenv: fixedEnv})
	if res != nil {
		for _, o := range res.Observations {
			t.Logf("%s %s denied=%v error=%v %q %s", o.Kind, o.Tool, o.Denied, o.IsError, clipText(o.Text), o.Input)
		}
		t.Logf("exit %d in %v, stopped %q; stderr: %s", res.ExitCode, res.Duration, res.Stopped, clipText(res.Stderr))
	}
	for _, req := range mock.Requests() {
		t.Logf("offered: %v", mockapi.OfferedTools(req))
		break
	}
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	absent(t, filepath.Join(ws, "native.txt"), filepath.Join(ws, "denied.txt"))
	present(t, filepath.Join(ws, "governed.txt"), filepath.Join(ws, "allowed.txt"))
	if res.Certificate != filepath.Join(dir, "cert.json") {
		t.Errorf("certificate %q", res.Certificate)
	}
	chainPath, data := closedChain(t, filepath.Join(dir, "ev"))
	// Every call polc got starts an operation (tool_id, request
	// digest); the denied one ends operation_denied and nothing else
	// is denied. The provider's own shell never reached polc.
	var tools, bound []string
	denied := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		rec, err := chain.ParseRecord([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		switch rec.RecordType {
		case "operation_started":
			var pl struct {
				ToolID string `json:"tool_id"`
			}
			json.Unmarshal([]byte(rec.PayloadJSON), &pl)
			tools = append(tools, pl.ToolID)
		case "operation_denied":
			denied++
		case "policy_bound":
			// The session file names no backend (inprocess by
			// default); the plan gives polc mcp landlock.
			var pl struct {
				Backend string `json:"effect_backend_id"`
			}
			json.Unmarshal([]byte(rec.PayloadJSON), &pl)
			bound = append(bound, pl.Backend)
		}
	}
	if len(bound) == 0 || slices.ContainsFunc(bound, func(b string) bool { return b != "landlock" }) {
		t.Errorf("the chain's operations were bound to backends %v, want landlock each", bound)
	}
	if strings.Join(tools, " ") != "write_file bash bash" || denied != 1 {
		t.Errorf("the chain holds operations %v with %d denied, want write_file bash bash with 1 denied", tools, denied)
	}
	vkey, err := os.ReadFile(filepath.Join(dir, "keys", "certifier.vkey"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "trust.txt"), []byte("certifier "+strings.TrimSpace(string(vkey))+"\n"), 0o644)
	var out bytes.Buffer
	if code := certverifycli.Run(context.Background(), []string{"cert", res.Certificate, "--chain", chainPath,
		"--snapshot", filepath.Join(dir, "out", "snapshots", "gov.json"), "--trust", filepath.Join(dir, "trust.txt")},
		certverifycli.Env{Stdout: &out, Stderr: &out, Now: time.Now}); code != 0 {
		t.Fatalf("certverify: %d\n%s", code, out.String())
	}
}

// closedChain returns the one chain under ev, verified and closed.
func closedChain(t *testing.T, ev string) (string, []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(ev, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("chains: %v", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{RequireClosed: true})
	if err != nil || !res.OK() {
		t.Fatalf("chain: %v %+v", err, res)
	}
	return files[0], data
}

// TestRealGovernedRunCLI runs `polc harness run` (this binary as polc) on a
// governed Claude Code harness against the loopback mock model, whose one
// call is polc's write_file: the run must exit 0, the observations are
// stdout's JSON lines, and stderr ends with where the evidence and the
// certificate are, the certificate being this run's (none was there
// before) and of the session's snapshot.
func TestRealGovernedRunCLI(t *testing.T) {
	t.Parallel()
	const provider = "claude-code"
	p := probe(t, provider)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(ws, 0o755)
	os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(governedPolicy), 0o644)
	runPolc(t, dir, "compile", "policy.cue", "-o", "out")
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/gov.json\nprofile: certifiable\nworkspace: ws\nprincipal: agent:gov\ntenant: acme\n"), 0o644)
	mock := mockapi.Start(t, mockapi.Script{Text: "Done.", Calls: []mockapi.Call{
		{Tool: polcTool(provider, "write_file"), Input: map[string]any{"path": "governed.txt", "content": "x\n"}},
	}})
	src := func(degraded []string) string {
		q := make([]string, len(degraded))
		for i, d := range degraded {
			q[i] = fmt.Sprintf("%q", d)
		}
		return fmt.Sprintf(`package h
harnesses: h: {
	provider: %q
	model: %q
	endpoint: base_url: %q
	workspace: root: "ws"
	governed: {session: "session.yaml", evidence: "ev", cert: "cert.json"}
	environment: secrets: %s: "env:POLC_TEST_MODEL_KEY"
	resources: wall_clock: "150s"
	allow_degraded: [%s]
}
`, provider, mockModels[provider], mock.URL, modelKeys[provider], strings.Join(q, ", "))
	}
	_, rep, err := harness.Compile(specFrom(t, dir, src(nil)), p)
	if err != nil {
		t.Fatal(err)
	}
	var degraded []string
	for _, r := range rep.All() {
		if r.Status != harness.Enforced {
			degraded = append(degraded, r.Capability)
		}
	}
	os.WriteFile(filepath.Join(dir, "h.cue"), []byte(src(degraded)), 0o644)
	cmd := exec.Command(os.Args[0], "harness", "run", "h", "h.cue", "--prompt", "do as you are told", "--executable", p.Executable)
	cmd.Dir = dir
	key, _ := fixedEnv("POLC_TEST_MODEL_KEY")
	cmd.Env = append(os.Environ(), polcMainEnv+"=1", "POLC_TEST_MODEL_KEY="+key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("polc harness run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	want := fmt.Sprintf("polc harness run: governed session closed: evidence %s, certificate %s", filepath.Join(dir, "ev"), filepath.Join(dir, "cert.json"))
	if last := lines[len(lines)-1]; last != want {
		t.Fatalf("stderr ends %q, want %q\n%s", last, want, stderr.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if !json.Valid([]byte(l)) {
			t.Fatalf("stdout line %q is not an observation", l)
		}
	}
	present(t, filepath.Join(ws, "governed.txt"))
	closedChain(t, filepath.Join(dir, "ev"))
	// A second run would report the first run's certificate as its own:
	// it is refused before the provider starts (the model is asked
	// nothing more).
	asked := len(mock.Requests())
	cmd = exec.Command(os.Args[0], "harness", "run", "h", "h.cue", "--prompt", "again", "--executable", p.Executable)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), polcMainEnv+"=1", "POLC_TEST_MODEL_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "a file is already at the certificate path "+filepath.Join(dir, "cert.json")) {
		t.Fatalf("a second run over the first run's certificate: %v\n%s", err, out)
	}
	if n := len(mock.Requests()); n != asked {
		t.Errorf("the refused run asked the model %d times", n-asked)
	}
}
