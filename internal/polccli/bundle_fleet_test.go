package polccli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/internal/atomicfile"
)

// fleetPolicy is revision i's policy: revision 1 lets agent:fleet read
// everything, revision 2 only docs/** (so reading notes/a.txt is denied),
// revision 3 notes/** (allowed again, by another rule).
func fleetPolicy(i int) string {
	read := map[int]string{1: `"**"`, 2: `"docs/**"`, 3: `"notes/**"`}[i]
	return fmt.Sprintf(`package p
policies: fleet: {
	version: "%d"
	principals: ["agent:fleet"]
	tenants: ["acme"]
	actions: allow: ["read_file"]
	filesystem: read: [%s]
}
`, i, read)
}

// fleetRevision is what the fleet should answer for one revision.
type fleetRevision struct {
	bundle   string // the bundle file
	revision string
	decision string // disposition and rule ids, as fleetAnswer prints them
}

// opaInstance is one `opa run --server` of the fleet.
type opaInstance struct {
	addr   string
	output *lockedBuffer
	exited chan struct{}
}

// TestOPAFleetRollout runs the fleet docs/scale.md describes, for real:
// polc bundle publish writes signed bundles into a directory, polc bundle
// serve serves it, and three `opa run --server` processes (POLC_OPA) poll
// it with their own bundle service configuration, verifying signatures
// with the config's keys (two poll every 1-2 s, the third long-polls). Publishing revision N+1 reaches all three (the
// time it took is logged); a tampered bundle (data changed after signing)
// and an unsigned one, put in place of the current bundle behind polc's
// back, are refused by every instance, which keep answering with the
// revision they run (decision and bundle status alike); publish itself
// refuses both; the next good revision is taken up again.
func TestOPAFleetRollout(t *testing.T) {
	bin := os.Getenv("POLC_OPA")
	if bin == "" {
		t.Skip("POLC_OPA is not set: run `export POLC_OPA=$(scripts/opa.sh)` (.ci/run does)")
	}
	dir := t.TempDir()
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	polc := func(args ...string) (string, int) {
		t.Helper()
		before := len(stdout.String())
		code := Run(context.Background(), args, e)
		return stdout.String()[before:], code
	}
	mustPolc := func(args ...string) string {
		t.Helper()
		out, code := polc(args...)
		if code != 0 {
			t.Fatalf("polc %v: exit %d\n%s", args, code, stderr.String())
		}
		return out
	}
	mustPolc("keygen", "fleet", "-o", "keys", "--key-format", "pem")
	os.WriteFile(filepath.Join(dir, "req.json"), []byte(`{"action": "read_file", "arguments": {"path": "notes/a.txt"}, "principal": "agent:fleet", "tenant": "acme", "workspace": "/workspace", "time": "2026-03-15T12:00:00Z"}`), 0o644)
	normalized := mustPolc("normalize", "--input", "req.json")
	os.WriteFile(filepath.Join(dir, "norm.json"), []byte(normalized), 0o644)

	revs := map[int]*fleetRevision{}
	for i := 1; i <= 3; i++ {
		src := filepath.Join(dir, fmt.Sprintf("v%d", i))
		os.MkdirAll(src, 0o755)
		os.WriteFile(filepath.Join(src, "p.cue"), []byte(fleetPolicy(i)), 0o644)
		out := fmt.Sprintf("out%d", i)
		mustPolc("compile", src, "-o", out, "--sign-key", "keys/fleet.pem")
		var d struct {
			Disposition string   `json:"disposition"`
			RuleIDs     []string `json:"rule_ids"`
		}
		if err := json.Unmarshal([]byte(mustPolc("eval", "--snapshot", out+"/snapshots/fleet.json", "--input", "norm.json")), &d); err != nil {
			t.Fatal(err)
		}
		b := filepath.Join(dir, out, "bundle.tar.gz")
		data, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		revs[i] = &fleetRevision{bundle: b, revision: manifestRevision(t, data), decision: d.Disposition + " " + strings.Join(d.RuleIDs, ",")}
	}
	if revs[1].decision == revs[2].decision || revs[2].decision == revs[3].decision {
		t.Fatalf("the revisions decide alike: %+v %+v %+v", revs[1], revs[2], revs[3])
	}
	// Revision 3 tampered with after signing, and compiled unsigned.
	signed3, _ := os.ReadFile(revs[3].bundle)
	tampered := filepath.Join(dir, "tampered.tar.gz")
	os.WriteFile(tampered, rewriteBundleData(t, signed3), 0o644)
	mustPolc("compile", filepath.Join(dir, "v3"), "-o", "unsigned")
	unsigned := filepath.Join(dir, "unsigned", "bundle.tar.gz")

	publish := func(bundle string) {
		t.Helper()
		mustPolc("bundle", "publish", bundle, "srv", "--verification-key", "keys/fleet.pub.pem")
	}
	publish(revs[1].bundle)
	for _, bad := range []string{tampered, unsigned} {
		if out, code := polc("bundle", "publish", bad, "srv", "--verification-key", "keys/fleet.pub.pem"); code != ExitUsage {
			t.Errorf("publish %s: exit %d, want %d (refused)\n%s", filepath.Base(bad), code, ExitUsage, out)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- runBundleServe(ctx, e, &bundleServeParams{dir: "srv", listen: "tcp:127.0.0.1:0", ready: func(a string) { ready <- a }})
	}()
	var srvAddr string
	select {
	case srvAddr = <-ready:
	case err := <-served:
		t.Fatalf("bundle serve: %v\n%s", err, stderr.String())
	}

	pub, err := os.ReadFile(filepath.Join(dir, "keys", "fleet.pub.pem"))
	if err != nil {
		t.Fatal(err)
	}
	var fleet []*opaInstance
	for i := range 3 {
		// The third instance long-polls.
		cfg, err := json.Marshal(fleetOPAConfig("http://"+srvAddr, string(pub), i == 2))
		if err != nil {
			t.Fatal(err)
		}
		cfgFile := filepath.Join(dir, fmt.Sprintf("opa%d.json", i))
		os.WriteFile(cfgFile, cfg, 0o644)
		fleet = append(fleet, startOPA(t, bin, cfgFile))
	}
	query := `{"input": {"policy": "fleet", "request": ` + normalized + `}}`

	// Every instance runs revision 1.
	awaitFleet(t, fleet, query, revs[1], nil, 3*time.Minute)

	// Revision 2: the rollout, timed from the publish.
	publish(revs[2].bundle)
	took := awaitFleet(t, fleet, query, revs[2], nil, 3*time.Minute)
	t.Logf("revision 2 reached the 3 instances after %v (each: %v)", slicesMax(took), took)

	// Behind publish's back: a tampered bundle, then an unsigned one, in
	// the current bundle's place. Each instance refuses it and keeps
	// revision 2.
	for _, bad := range []struct{ file, refusal string }{
		{tampered, "digest mismatch"},
		{unsigned, "bundle missing .signatures.json file"},
	} {
		data, err := os.ReadFile(bad.file)
		if err != nil {
			t.Fatal(err)
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, "srv", bundlesDir, bundleName+bundleExt), data, 0o644); err != nil {
			t.Fatal(err)
		}
		awaitFleet(t, fleet, query, revs[2], &bad.refusal, 3*time.Minute)
	}

	// The next good revision is taken up.
	publish(revs[3].bundle)
	took = awaitFleet(t, fleet, query, revs[3], nil, 3*time.Minute)
	t.Logf("revision 3 reached the 3 instances after %v (each: %v)", slicesMax(took), took)

	cancel()
	if err := <-served; err != nil {
		t.Errorf("bundle serve: %v", err)
	}
}

// manifestRevision reads a bundle's revision without checking its
// signature.
func manifestRevision(t *testing.T, data []byte) string {
	t.Helper()
	files, err := bundleFiles(data)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Revision string `json:"revision"`
	}
	if err := json.Unmarshal(files[".manifest"], &m); err != nil || m.Revision == "" {
		t.Fatalf("manifest %q: %v", files[".manifest"], err)
	}
	return m.Revision
}

// fleetOPAConfig is the OPA configuration docs/scale.md shows: the bundle
// service, the bundle polled every 1-2 s (or long-polled, 10 s at a time)
// and verified with the key, and the status API (GET /v1/status) without
// console logs.
func fleetOPAConfig(url, pubKey string, longPoll bool) map[string]any {
	polling := map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 2}
	if longPoll {
		polling["long_polling_timeout_seconds"] = 10
	}
	return map[string]any{
		"services": map[string]any{"polc": map[string]any{"url": url}},
		"bundles": map[string]any{"polc": map[string]any{
			"service":  "polc",
			"resource": "bundles/polc.tar.gz",
			"polling":  polling,
			"signing":  map[string]any{"keyid": "polc"},
		}},
		"keys":   map[string]any{"polc": map[string]any{"algorithm": "ES256", "key": pubKey}},
		"status": map[string]any{"prometheus": true},
	}
}

// startOPA starts `opa run --server` with the configuration file on a free
// loopback port (tried again on another port when OPA could not listen:
// the port was free when chosen, not necessarily when OPA bound it). The
// process is stopped when the test ends.
func startOPA(t *testing.T, bin, cfgFile string) *opaInstance {
	t.Helper()
retry:
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		o := &opaInstance{addr: addr, output: &lockedBuffer{}, exited: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "run", "--server", "--addr", addr, "--config-file", cfgFile, "--log-level", "error")
		cmd.Stdout, cmd.Stderr = o.output, o.output
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		go func() { cmd.Wait(); close(o.exited) }()
		t.Cleanup(func() { cancel(); <-o.exited })
		// Listening: /health answers (200 once the bundle is active,
		// 500 before).
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			select {
			case <-o.exited:
				if attempt < 3 && strings.Contains(o.output.String(), "address already in use") {
					continue retry
				}
				t.Fatalf("opa exited:\n%s", o.output.String())
			default:
			}
			if resp, err := http.Get("http://" + addr + "/health"); err == nil {
				resp.Body.Close()
				return o
			}
		}
		t.Fatalf("opa did not listen on %s within a minute:\n%s", addr, o.output.String())
	}
}

// fleetState is what an instance answers: its decision on the query, its
// active revision (GET /v1/data/system/bundles) and its bundle status
// (GET /v1/status: the last error, the time of its last request).
type fleetState struct {
	decision, revision, message string
	lastRequest                 time.Time
}

// state asks the instance for its decision and revision and, when
// status is set, its bundle status (a large document: its metrics).
func (o *opaInstance) state(query string, status bool) (fleetState, error) {
	var s fleetState
	var d struct {
		Result struct {
			Disposition string   `json:"disposition"`
			RuleIDs     []string `json:"rule_ids"`
		} `json:"result"`
	}
	if err := opaJSON(http.Post("http://"+o.addr+"/v1/data/polc/decision", "application/json", strings.NewReader(query)))(&d); err != nil {
		return s, err
	}
	s.decision = d.Result.Disposition + " " + strings.Join(d.Result.RuleIDs, ",")
	var b struct {
		Result string `json:"result"`
	}
	if err := opaJSON(http.Get("http://" + o.addr + "/v1/data/system/bundles/polc/manifest/revision"))(&b); err != nil {
		return s, err
	}
	s.revision = b.Result
	if !status {
		return s, nil
	}
	var st struct {
		Result struct {
			Bundles map[string]struct {
				ActiveRevision string    `json:"active_revision"`
				Message        string    `json:"message"`
				LastRequest    time.Time `json:"last_request"`
			} `json:"bundles"`
		} `json:"result"`
	}
	if err := opaJSON(http.Get("http://" + o.addr + "/v1/status"))(&st); err != nil {
		return s, err
	}
	bs := st.Result.Bundles["polc"]
	if bs.ActiveRevision != s.revision {
		return s, fmt.Errorf("status says revision %q, data.system.bundles %q", bs.ActiveRevision, s.revision)
	}
	s.message, s.lastRequest = bs.Message, bs.LastRequest
	return s, nil
}

// opaJSON decodes an OPA answer (status 200) into v.
func opaJSON(resp *http.Response, err error) func(v any) error {
	return func(v any) error {
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %d %s", resp.Request.URL.Path, resp.StatusCode, body)
		}
		return json.Unmarshal(body, v)
	}
}

// awaitFleet polls every instance until it answers with revision want
// (its decision and its bundle status) and, when refusal is set, reports
// a bundle error containing it in a request made after the call began.
// It returns how long each instance took.
func awaitFleet(t *testing.T, fleet []*opaInstance, query string, want *fleetRevision, refusal *string, timeout time.Duration) []time.Duration {
	t.Helper()
	start := time.Now()
	took := make([]time.Duration, len(fleet))
	last := make([]fleetState, len(fleet))
	errs := make([]error, len(fleet))
	done := 0
	every := 20 * time.Millisecond
	if refusal != nil {
		every = 200 * time.Millisecond
	}
	for deadline := start.Add(timeout); done < len(fleet) && time.Now().Before(deadline); time.Sleep(every) {
		for i, o := range fleet {
			if took[i] != 0 {
				continue
			}
			select {
			case <-o.exited:
				t.Fatalf("opa %s exited:\n%s", o.addr, o.output.String())
			default:
			}
			s, err := o.state(query, refusal != nil)
			last[i], errs[i] = s, err
			if err != nil {
				continue
			}
			if refusal == nil {
				if s.decision != want.decision || s.revision != want.revision {
					continue
				}
				at := time.Since(start)
				// The status API says so too (it may follow the
				// activation by a moment: asked again until it does).
				if s, err := o.state(query, true); err != nil || s.revision != want.revision {
					last[i], errs[i] = s, err
					continue
				}
				took[i] = at
				done++
				continue
			}
			// A refusal: the instance has asked since the bad bundle was
			// put in place and reports why it refused it, and still runs
			// the revision it had.
			if s.decision != want.decision || s.revision != want.revision {
				t.Fatalf("opa %s left revision %s for %q (%s) instead of refusing the bundle:\n%s", o.addr, want.revision, s.revision, s.decision, o.output.String())
			}
			if s.lastRequest.After(start) && strings.Contains(s.message, *refusal) {
				took[i] = time.Since(start)
				done++
			}
		}
	}
	if done < len(fleet) {
		for i, o := range fleet {
			if took[i] == 0 {
				t.Errorf("opa %s after %v: %+v %v (want revision %s, %q; refusal %v)\n%s", o.addr, timeout, last[i], errs[i], want.revision, want.decision, refusal, o.output.String())
			}
		}
		t.FailNow()
	}
	return took
}

func slicesMax(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

// rewriteBundleData adds a name to the policy index in data.json (a name
// that selects the fleet policy's module) and
// keeps every other file, the signature included: the bundle's files no
// longer have the digests the signature covers.
func rewriteBundleData(t *testing.T, bundle []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(bundle))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	changed := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(h.Name, "data.json") {
			var d map[string]any
			if err := json.Unmarshal(data, &d); err != nil {
				t.Fatal(err)
			}
			polc, _ := d["polc"].(map[string]any)
			ids, ok := polc["ids"].(map[string]any)
			if !ok {
				t.Fatalf("data.json holds no polc.ids index: %s", data)
			}
			ids["tampered"] = "fleet"
			if data, err = json.Marshal(d); err != nil {
				t.Fatal(err)
			}
			changed = true
		}
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	tw.Close()
	zw.Close()
	if !changed {
		t.Fatal("no data.json in the bundle")
	}
	return out.Bytes()
}
