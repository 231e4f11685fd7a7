package polccli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"polc.dev/polc/normalize"
	"polc.dev/polc/sandbox"
)

// protectPolicy grants, besides the workspace, the whole temporary
// directory (ROOT/**, read and write) where the tests put the session's
// files: the policy of the adversarial review, which granted /tmp/**.
const protectPolicy = `package p

policies: agent: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["bash", "read_file", "write_file", "edit_file"]
	filesystem: read: ["**", "ROOT/**"]
	filesystem: write: ["**", "ROOT/**"]
	subprocess: {mode: "allowlist", allow: ["cat *", "echo *", "sh *", "/usr/bin/python3 *"], shell: "allow"}
}
`

// protectRig is a certifiable session's directory under the temporary
// root the policy grants: session.yaml (backend as given), the compiled
// snapshot, a signer key, a workspace, a file outside the workspace the
// policy grants (outside.txt), and link, a symbolic link to the key's
// directory.
type protectRig struct {
	dir, key, snap, ev, cert, link string
	keyText                        string // the signer key's secret part
}

func newProtectRig(t *testing.T, backend string) *protectRig {
	t.Helper()
	root, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !within(root, dir) {
		t.Skipf("the test directory %s is not under the temporary root %s", dir, root)
	}
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(strings.ReplaceAll(protectPolicy, "ROOT", root)), 0o644)
	if code := Run(context.Background(), []string{"compile", "policy.cue", "-o", "out"}, e); code != 0 {
		t.Fatalf("compile: %d\n%s", code, stderr.String())
	}
	if code := Run(context.Background(), []string{"keygen", "certifier", "-o", "keys"}, e); code != 0 {
		t.Fatalf("keygen: %d\n%s", code, stderr.String())
	}
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte("snapshot: out/snapshots/agent.json\nprofile: certifiable\nworkspace: ws\n"+
		"principal: agent:gov\ntenant: acme\nbackend: "+backend+"\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
	os.WriteFile(filepath.Join(dir, "outside.txt"), []byte("granted\n"), 0o644)
	r := &protectRig{dir: dir, key: filepath.Join(dir, "keys", "certifier.key"), snap: filepath.Join(dir, "out", "snapshots", "agent.json"),
		ev: filepath.Join(dir, "ev"), cert: filepath.Join(dir, "cert.json"), link: filepath.Join(dir, "link")}
	if err := os.Symlink(filepath.Join(dir, "keys"), r.link); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(r.key)
	if err != nil {
		t.Fatal(err)
	}
	// PRIVATE+KEY+<name>+<hash>+<key, base64>
	f := strings.SplitN(strings.TrimSpace(string(b)), "+", 5)
	r.keyText = f[len(f)-1]
	if len(f) != 5 || len(r.keyText) < 20 {
		t.Fatalf("key %q", b)
	}
	return r
}

// sessionFlags are polc mcp's (and polc run's) flags for the rig.
func (r *protectRig) sessionFlags() []string {
	return []string{"session.yaml", "--evidence", "ev", "--cert", "cert.json", "--sign-key", "keys/certifier.key"}
}

// call makes one tool call and returns its kind, reason code and the
// whole result as JSON.
func (r *protectRig) call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (kind, reason, all string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	b, _ := json.Marshal(res)
	meta, _ := res.Meta[outcomeMetaKey].(map[string]any)
	sc, _ := res.StructuredContent.(map[string]any)
	kind, _ = meta["kind"].(string)
	reason, _ = sc["reason_code"].(string)
	return kind, reason, string(b)
}

// TestProtectedSessionFilesMCP: a policy that grants the temporary root
// (where the session's files lie) used to let polc mcp's read_file
// return the certificate signer key and write_file plant a chain in the
// evidence directory. Now each access to a file of the session — the key
// (also through a link to its directory), the evidence directory, the
// snapshot, a directory holding the key (written) — is denied
// guard:protected_path, whatever the policy grants, the key's bytes are in
// no result and nothing is planted, while a file the policy grants
// outside the workspace stays readable.
func TestProtectedSessionFilesMCP(t *testing.T) {
	r := newProtectRig(t, "inprocess")
	cs, _, stderr := connectStdio(t, r.dir, r.sessionFlags()...)
	snapBefore, _ := os.ReadFile(r.snap)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": r.key}},
		{"read_file", map[string]any{"path": r.link + "/certifier.key"}},
		{"read_file", map[string]any{"path": strings.ToUpper(r.dir[:2]) + r.dir[2:] + "/KEYS/certifier.key"}},
		{"write_file", map[string]any{"path": r.ev + "/planted.jsonl", "content": "{}\n"}},
		{"write_file", map[string]any{"path": r.cert, "content": "forged"}},
		{"write_file", map[string]any{"path": filepath.Join(r.dir, "keys"), "content": "x"}},
		{"edit_file", map[string]any{"path": r.snap, "old": `"version"`, "new": `"versio"`}},
		{"read_file", map[string]any{"path": filepath.Join(r.dir, "session.yaml")}},
	} {
		kind, reason, all := r.call(t, cs, c.tool, c.args)
		if kind != "denied" || reason != "guard:protected_path" {
			t.Errorf("%s %v: %s %s, want denied guard:protected_path: %s", c.tool, c.args, kind, reason, all)
		}
		if strings.Contains(all, r.keyText) {
			t.Errorf("%s %v: the key's bytes are in the result", c.tool, c.args)
		}
	}
	// Control: the grant outside the workspace holds for other files.
	if kind, _, all := r.call(t, cs, "read_file", map[string]any{"path": filepath.Join(r.dir, "outside.txt")}); kind != "succeeded" || !strings.Contains(all, "granted") {
		t.Errorf("outside.txt: %s %s", kind, all)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), r.keyText) {
		t.Error("the key's bytes are on stderr")
	}
	for _, p := range []string{r.ev + "/planted.jsonl", filepath.Join(r.dir, "keys", ".keys.tmp")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was planted", p)
		}
	}
	if b, _ := os.ReadFile(r.snap); string(b) != string(snapBefore) {
		t.Error("the snapshot was edited")
	}
	if b, _ := os.ReadFile(r.cert); strings.Contains(string(b), "forged") {
		t.Error("the certificate was forged")
	}
	verifyClosedChain(t, r.dir)
}

// TestProtectedSessionFilesLandlock: under the landlock backend, with the
// same grant, an allowed program cannot read the key (cat, python3,
// through a link to its directory), a redirection into the evidence
// directory is denied (guard:protected_path) and the process's own write
// there or to the certificate not written yet is refused by the kernel;
// nothing is planted and the key's bytes are in no result. A file the
// policy grants outside the workspace stays readable.
func TestProtectedSessionFilesLandlock(t *testing.T) {
	if os.Getenv("POLC_REQUIRE_SANDBOX") == "" {
		if f, _ := sandbox.Probe().Facet(sandbox.FacetFilesystem); f.State == sandbox.Unsupported {
			t.Skipf("the kernel cannot hold a process here: %+v", f)
		}
	}
	r := newProtectRig(t, "landlock")
	cs, _, stderr := connectStdio(t, r.dir, r.sessionFlags()...)
	commands := []string{
		"cat " + r.key,
		"cat " + r.link + "/certifier.key",
		"sh -c 'cat " + r.key + "'",
		"echo planted > " + r.ev + "/planted.jsonl",
		"sh -c 'echo planted > " + r.ev + "/own.jsonl'",
		"sh -c 'echo forged > " + r.cert + "'",
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		commands = append(commands, "/usr/bin/python3 -c 'print(open(\""+r.key+"\").read())'")
	} else {
		t.Log("no /usr/bin/python3: its attempt is skipped")
	}
	for _, command := range commands {
		kind, reason, all := r.call(t, cs, "bash", map[string]any{"command": command})
		if kind == "succeeded" {
			t.Errorf("%s: succeeded: %s", command, all)
		}
		if strings.Contains(command, "echo planted >") && !strings.Contains(command, "sh -c") && reason != "guard:protected_path" {
			t.Errorf("%s: %s %s, want denied guard:protected_path", command, kind, reason)
		}
		if strings.Contains(all, r.keyText) {
			t.Errorf("%s: the key's bytes are in the result: %s", command, all)
		}
	}
	// Before the close writes it: the command did not.
	if _, err := os.Lstat(r.cert); err == nil {
		t.Error("the certificate was written by the command")
	}
	if kind, _, all := r.call(t, cs, "bash", map[string]any{"command": "cat " + filepath.Join(r.dir, "outside.txt")}); kind != "succeeded" || !strings.Contains(all, "granted") {
		t.Errorf("cat outside.txt: %s %s", kind, all)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, stderr.String())
	}
	for _, f := range []string{"planted.jsonl", "own.jsonl"} {
		if _, err := os.Lstat(filepath.Join(r.ev, f)); err == nil {
			t.Errorf("%s was planted in the evidence directory", f)
		}
	}
	if b, _ := os.ReadFile(r.cert); strings.Contains(string(b), "forged") {
		t.Error("the certificate was forged")
	}
	verifyClosedChain(t, r.dir)
}

// TestProtectedSessionFilesRun: polc run's actions are held off the
// session's files in the same way.
func TestProtectedSessionFilesRun(t *testing.T) {
	r := newProtectRig(t, "inprocess")
	scen, _ := os.ReadFile(filepath.Join(r.dir, "session.yaml"))
	scen = append(scen, []byte("actions:\n"+
		"  - {id: key, action: read_file, arguments: {path: \""+r.key+"\"}}\n"+
		"  - {id: link, action: read_file, arguments: {path: \""+r.link+"/certifier.key\"}}\n"+
		"  - {id: plant, action: write_file, arguments: {path: \""+r.ev+"/planted.jsonl\", content: \"x\"}}\n"+
		"  - {id: snap, action: edit_file, arguments: {path: \""+r.snap+"\", old: \"\\\"version\\\"\", new: \"\\\"versio\\\"\"}}\n"+
		"  - {id: redirect, action: bash, arguments: {command: \"echo x > "+r.ev+"/r.jsonl\"}}\n"+
		"  - {id: outside, action: read_file, arguments: {path: \""+filepath.Join(r.dir, "outside.txt")+"\"}}\n")...)
	os.WriteFile(filepath.Join(r.dir, "session.yaml"), scen, 0o644)
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: r.dir}
	Run(context.Background(), append([]string{"run"}, append(r.sessionFlags(), "--format", "json", "--show-output")...), e)
	var out struct {
		Outcomes []struct {
			ID         string
			ReasonCode string `json:"reason_code"`
		}
	}
	if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var got []string
	for _, o := range out.Outcomes {
		got = append(got, o.ID+" "+o.ReasonCode)
	}
	want := []string{"key guard:protected_path", "link guard:protected_path", "plant guard:protected_path",
		"snap guard:protected_path", "redirect guard:protected_path", "outside "}
	if !slices.Equal(got, want) {
		t.Errorf("outcomes %q, want %q\n%s", got, want, stdout.String())
	}
	if strings.Contains(stdout.String()+stderr.String(), r.keyText) {
		t.Error("the key's bytes are in the output")
	}
	for _, f := range []string{"planted.jsonl", "r.jsonl"} {
		if _, err := os.Lstat(filepath.Join(r.ev, f)); err == nil {
			t.Errorf("%s was planted", f)
		}
	}
}

// TestProtectedPathsList: every file a session's flags name is on the
// list, as written (absolute, clean) and resolved through links, with the
// SQLite siblings of the state database, the executable and the launcher
// next to it.
func TestProtectedPathsList(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "real"), 0o755)
	os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "lnk"))
	e := &env{dir: dir}
	p := &runParams{evidence: "lnk/ev", cert: "lnk/c/./cert.json", signKey: dir + "/k.key", state: "lnk/st.db", trust: "trust.txt",
		approvals: []string{"a1.approval", "lnk/a2.approval"}, approvalDir: "lnk/approvals", approvalRequests: "reqs", socket: dir + "/lnk/s.sock"}
	exe := filepath.Join(dir, "lnk", "bin", "polc")
	files, programs, err := protectedPaths(e, p, filepath.Join(dir, "lnk", "session.yaml"), filepath.Join(dir, "snap.json"), exe, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		got   []string
		names []string
	}{
		{files, []string{"lnk/ev", "lnk/c/cert.json", "k.key", "lnk/st.db", "lnk/st.db-wal", "lnk/st.db-shm", "lnk/st.db-journal",
			"trust.txt", "a1.approval", "lnk/a2.approval", "lnk/approvals", "reqs", "lnk/s.sock", "lnk/session.yaml", "snap.json"}},
		{programs, []string{"lnk/bin/polc", "lnk/bin/polc-sandbox"}},
	} {
		if !slices.IsSorted(c.got) || len(slices.Compact(slices.Clone(c.got))) != len(c.got) {
			t.Errorf("not sorted or with duplicates: %q", c.got)
		}
		var want []string
		for _, f := range c.names {
			want = append(want, filepath.Join(dir, f), filepath.Join(dir, strings.Replace(f, "lnk/", "real/", 1)))
		}
		slices.Sort(want)
		if want = slices.Compact(want); !slices.Equal(c.got, want) {
			t.Errorf("list %q, want %q", c.got, want)
		}
	}
}

// TestProtectGuard: the guard refuses any access at or under a protected
// path and a write at a directory above one, in any case and through a
// link; a read of such a directory, and paths beside, are the policy's.
func TestProtectGuard(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "keys"), 0o755)
	os.Symlink(filepath.Join(dir, "keys"), filepath.Join(dir, "lnk"))
	g := protectGuard([]string{filepath.Join(dir, "keys", "k.key"), filepath.Join(dir, "ev")})
	for _, c := range []struct {
		path, access string
		refused      bool
	}{
		{dir + "/keys/k.key", "read", true},
		{dir + "/KEYS/K.KEY", "read", true},
		{dir + "/lnk/k.key", "read", true},
		{dir + "/ev", "read", true},
		{dir + "/ev/new.jsonl", "write", true},
		{dir + "/ev/a/b", "execute", true},
		{dir + "/keys", "write", true},
		{dir, "write", true},
		{"/", "write", true},
		{dir + "/keys", "read", false},
		{dir + "/keys/k.key2", "read", false},
		{dir + "/evidence", "write", false},
		{dir + "/lnk/other", "write", false},
		{"relative/path", "read", true},
	} {
		err := g.Check(context.Background(), &normalize.Normalized{Paths: []normalize.PathAccess{{Path: c.path, Access: c.access}}})
		if (err != nil) != c.refused {
			t.Errorf("%s %s: refused %v, want %v", c.access, c.path, err, c.refused)
		}
	}
}
