package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

const testPolicy = `package p
policies: team: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: {
		allow: ["echo", "fail", "slow", "ambiguous", "nothing", "write_note", "probe"]
		deny: ["echo"]
		approve: [{pattern: "write_note", approver: "lead", expires_after: "1h"}]
	}
	gates: [{id: "notes", level: "soft", rules: ["approval*"]}]
}
`

func compilePolicy(t testing.TB, src string) *snapshot.Snapshot {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644)
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	return res.Snapshots[0]
}

// rig is an executor with counting test actions.
type rig struct {
	exec  *executor.Executor
	snap  *snapshot.Snapshot
	store chain.Store
	calls map[string]*atomic.Int64
	ids   atomic.Int64
}

type classErr struct{}

func (classErr) Error() string      { return "disk full: /secret/path" }
func (classErr) ErrorClass() string { return "disk_full" }

func newRig(t testing.TB, store chain.Store, mutate func(*executor.Config)) *rig {
	r := &rig{snap: compilePolicy(t, testPolicy), store: store, calls: map[string]*atomic.Int64{}}
	reg := executor.NewRegistry()
	obj := `{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":false}`
	add := func(id string, fn executor.Callable) {
		r.calls[id] = &atomic.Int64{}
		c := r.calls[id]
		if err := reg.Register(normalize.ActionDescriptor{ID: id, Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
			Arguments: []byte(obj)}, func(ctx context.Context, args map[string]any) (any, error) {
			c.Add(1)
			return fn(ctx, args)
		}); err != nil {
			t.Fatal(err)
		}
	}
	add("echo", func(_ context.Context, args map[string]any) (any, error) { return args["text"], nil })
	add("nothing", func(context.Context, map[string]any) (any, error) { return nil, nil })
	add("fail", func(context.Context, map[string]any) (any, error) { return nil, classErr{} })
	add("ambiguous", func(context.Context, map[string]any) (any, error) {
		return nil, fmt.Errorf("connection reset after send: %w", executor.ErrAmbiguous)
	})
	add("slow", func(ctx context.Context, _ map[string]any) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	add("write_note", func(context.Context, map[string]any) (any, error) { return "written", nil })
	cfg := executor.Config{
		Registry: reg, Policies: []*snapshot.Snapshot{r.snap}, Evidence: store,
		Now: func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) },
		IDs: func() string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", r.ids.Add(1)) },
	}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := executor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.exec = e
	return r
}

func (r *rig) ref() executor.SnapshotRef {
	return executor.SnapshotRef{PolicyID: r.snap.PolicyID, Version: r.snap.Version, Digest: r.snap.Digest}
}

func (r *rig) ctx(profile executor.Profile, b *executor.TaskBoundary) executor.ExecutionContext {
	return executor.ExecutionContext{ContextID: "c", Scope: executor.EphemeralScope{ID: "s"}, Principal: executor.Principal{Kind: "agent", ID: "a"},
		Tenant: "acme", Workspace: "/ws", Policy: r.ref(), Backend: "inprocess", Profile: profile, Boundary: b}
}

func req(id, action string, args map[string]any) executor.ExecutionRequest {
	return executor.ExecutionRequest{RequestID: id, Action: action, Arguments: args, Scope: executor.EphemeralScope{ID: "s"}}
}

func TestOutcomeKinds(t *testing.T) {
	r := newRig(t, nil, nil)
	ec := r.ctx(executor.ProfileMinimal, nil)
	// Cancelled once the slow callable is running, not after a fixed
	// time: under load the earlier cases could outlast a timer, and the
	// attempt was then cancelled before its call.
	cancelled, cancel := context.WithCancel(context.Background())
	slowBefore := r.calls["slow"].Load()
	go func() {
		for r.calls["slow"].Load() == slowBefore {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	cases := []struct {
		name   string
		ctx    context.Context
		req    executor.ExecutionRequest
		kind   executor.OutcomeKind
		reason string
		called bool
	}{
		{"success", context.Background(), req("1", "nothing", nil), executor.KindSucceeded, "", true},
		{"denied", context.Background(), req("2", "unknown", nil), executor.KindDenied, "unknown_action", false},
		{"escalated", context.Background(), req("3", "write_note", nil), executor.KindEscalated, "approval_required:lead", false},
		{"failed", context.Background(), req("4", "fail", nil), executor.KindFailed, "disk_full", true},
		{"ambiguous", context.Background(), req("5", "ambiguous", nil), executor.KindAmbiguous, "external_result_ambiguous", true},
		{"cancelled", cancelled, req("7", "slow", nil), executor.KindCancelled, "cancelled", true},
		{"timed_out", context.Background(), func() executor.ExecutionRequest {
			q := req("6", "slow", nil)
			q.Timeout = 10 * time.Millisecond
			return q
		}(), executor.KindTimedOut, "timed_out", true},
		{"bad arguments", context.Background(), req("8", "nothing", map[string]any{"extra": 1}), executor.KindDenied, "invalid_request", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := r.exec.Execute(c.ctx, c.req, ec)
			if out.Kind() != c.kind || out.Base().ReasonCode != c.reason {
				t.Fatalf("got %s %q, want %s %q; trail %+v", out.Kind(), out.Base().ReasonCode, c.kind, c.reason, out.Base().Trail)
			}
			if out.Base().Profile != executor.ProfileMinimal {
				t.Errorf("profile %q", out.Base().Profile)
			}
			if out.Base().CallExecuted != c.called {
				t.Errorf("call_executed = %v", out.Base().CallExecuted)
			}
		})
	}
	// A successful nil result is a success with the digest of null.
	out := r.exec.Execute(context.Background(), req("9", "nothing", nil), ec)
	s, ok := out.(*executor.Succeeded)
	if !ok || s.Result != nil || s.ResultDigest != "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b" {
		t.Fatalf("nil result: %#v", out)
	}
	// A failure carries a class, not the error text.
	f := r.exec.Execute(context.Background(), req("10", "fail", nil), ec).(*executor.Failed)
	if f.Class != "disk_full" || fmt.Sprint(f) == "" {
		t.Fatal(f.Class)
	}
}

func TestDeferredBeforeStart(t *testing.T) {
	r := newRig(t, chain.NewMemStore(), func(c *executor.Config) {
		c.Admission = &executor.Limiter{Rate: 1, Burst: 1}
	})
	b, _ := r.exec.OpenBoundary(r.ref(), false)
	ec := r.ctx(executor.ProfileGoverned, b)
	if out := r.exec.Execute(context.Background(), req("1", "nothing", nil), ec); out.Kind() != executor.KindSucceeded {
		t.Fatalf("first: %s", out.Kind())
	}
	out := r.exec.Execute(context.Background(), req("2", "nothing", nil), ec)
	d, ok := out.(*executor.Deferred)
	if !ok || d.RetryAt.IsZero() || len(d.Records) != 0 || d.OperationID != nil {
		t.Fatalf("want Deferred before operation_started, got %#v", out)
	}
}

func TestPrincipalClaimRefusedBeforePolicy(t *testing.T) {
	r := newRig(t, chain.NewMemStore(), nil)
	b, _ := r.exec.OpenBoundary(r.ref(), false)
	q := req("1", "nothing", nil)
	other := "agent:root"
	q.PrincipalClaim = &other
	out := r.exec.Execute(context.Background(), q, r.ctx(executor.ProfileGoverned, b))
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != "principal_claim_mismatch" || out.Base().Decision != nil || len(out.Base().Records) != 0 {
		t.Fatalf("got %s %q decision=%v records=%v", out.Kind(), out.Base().ReasonCode, out.Base().Decision, out.Base().Records)
	}
	same := "agent:a"
	q.PrincipalClaim = &same
	if out := r.exec.Execute(context.Background(), q, r.ctx(executor.ProfileGoverned, b)); out.Kind() != executor.KindSucceeded {
		t.Fatalf("matching claim: %s", out.Kind())
	}
}

func TestContainmentUnsupportedDeniesBeforeStart(t *testing.T) {
	r := newRig(t, chain.NewMemStore(), func(c *executor.Config) {
		c.Registry.Register(normalize.ActionDescriptor{ID: "sandboxed", Version: "1", Arguments: []byte(`{"type":"object"}`),
			Containment: []string{"filesystem", "network"}}, func(context.Context, map[string]any) (any, error) { return nil, nil })
	})
	b, _ := r.exec.OpenBoundary(r.ref(), false)
	out := r.exec.Execute(context.Background(), req("1", "sandboxed", nil), r.ctx(executor.ProfileGoverned, b))
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != "containment_unsupported" || len(out.Base().Records) != 0 {
		t.Fatalf("got %s %q records %v", out.Kind(), out.Base().ReasonCode, out.Base().Records)
	}
}

// faultStore fails the Nth Append (1-based) once.
type faultStore struct {
	chain.Store
	n, failAt int64
}

func (f *faultStore) Append(ctx context.Context, rec *chain.Record) (chain.AppendReceipt, error) {
	if atomic.AddInt64(&f.n, 1) == f.failAt {
		return chain.AppendReceipt{}, errors.New("injected append failure")
	}
	return f.Store.Append(ctx, rec)
}

// TestEvidenceFaultAtEveryAppend injects a failure at each append of a
// governed successful operation: before the call the callable is never
// reached (call_executed false); after it, the outcome stands, the error
// says call_executed true and nothing is invoked twice.
func TestEvidenceFaultAtEveryAppend(t *testing.T) {
	clean := newRig(t, chain.NewMemStore(), nil)
	b, _ := clean.exec.OpenBoundary(clean.ref(), false)
	out := clean.exec.Execute(context.Background(), req("2", "nothing", nil), clean.ctx(executor.ProfileGoverned, b))
	appends := int64(len(out.Base().Records))
	if appends < 5 {
		t.Fatalf("only %d appends in a governed success: %+v", appends, out.Base().Trail)
	}
	for failAt := int64(1); failAt <= appends; failAt++ {
		t.Run(fmt.Sprint(failAt), func(t *testing.T) {
			fs := &faultStore{Store: chain.NewMemStore(), failAt: failAt}
			r := newRig(t, fs, nil)
			b, _ := r.exec.OpenBoundary(r.ref(), false)
			out := r.exec.Execute(context.Background(), req("2", "nothing", nil), r.ctx(executor.ProfileGoverned, b))
			ev := out.Base().EvidenceError
			if ev == nil {
				t.Fatalf("no evidence error; outcome %s", out.Kind())
			}
			calls := r.calls["nothing"].Load()
			if failAt < appends {
				if ev.CallExecuted || calls != 0 || out.Kind() != executor.KindFailed {
					t.Fatalf("pre-call failure: kind %s call_executed %v calls %d", out.Kind(), ev.CallExecuted, calls)
				}
			} else {
				if !ev.CallExecuted || calls != 1 || out.Kind() != executor.KindSucceeded {
					t.Fatalf("post-call failure: kind %s call_executed %v calls %d", out.Kind(), ev.CallExecuted, calls)
				}
			}
		})
	}
}

// asyncFaultStore accepts every record in order but reports the Nth and
// every later one as not durable, as a group commit whose fsync failed
// does (durability is prefix-ordered).
type asyncFaultStore struct {
	chain.Store
	n, failAt int64
}

func (f *asyncFaultStore) AppendAsync(ctx context.Context, rec *chain.Record) (chain.AppendReceipt, func() error, error) {
	rc, err := f.Store.Append(ctx, rec)
	if err != nil {
		return rc, nil, err
	}
	failed := atomic.AddInt64(&f.n, 1) >= f.failAt
	return rc, func() error {
		if failed {
			return errors.New("injected fsync failure")
		}
		return nil
	}, nil
}

// TestEvidenceFaultAtEveryWait is TestEvidenceFaultAtEveryAppend for a
// store that fails at durability rather than at append: the failure
// surfaces where the executor waits (stage 4, stage 11, the terminal), and
// the outcome names the first record that did not become durable.
func TestEvidenceFaultAtEveryWait(t *testing.T) {
	// "nothing" succeeds (its last record follows the call); "echo" is
	// denied by policy (its failures all come before any call).
	for _, action := range []string{"nothing", "echo"} {
		clean := chain.NewMemStore()
		cr := newRig(t, clean, nil)
		b, _ := cr.exec.OpenBoundary(cr.ref(), false)
		out := cr.exec.Execute(context.Background(), req("2", action, nil), cr.ctx(executor.ProfileGoverned, b))
		recs, err := clean.Read(context.Background(), b.ChainID(), -1)
		if err != nil || len(recs) < 4 || len(recs) != len(out.Base().Records) {
			t.Fatalf("clean run of %s: %d records, %v", action, len(recs), err)
		}
		called := out.Kind() == executor.KindSucceeded
		for failAt := int64(1); failAt <= int64(len(recs)); failAt++ {
			want := string(recs[failAt-1].RecordType)
			t.Run(fmt.Sprint(action, "/", failAt, "-", want), func(t *testing.T) {
				fs := &asyncFaultStore{Store: chain.NewMemStore(), failAt: failAt}
				r := newRig(t, fs, nil)
				b, _ := r.exec.OpenBoundary(r.ref(), false)
				out := r.exec.Execute(context.Background(), req("2", action, nil), r.ctx(executor.ProfileGoverned, b))
				ev := out.Base().EvidenceError
				if ev == nil {
					t.Fatalf("no evidence error; outcome %s", out.Kind())
				}
				if ev.RecordType != want {
					t.Errorf("evidence error names %s, want %s", ev.RecordType, want)
				}
				calls := r.calls[action].Load()
				post := called && failAt == int64(len(recs))
				if !post && (ev.CallExecuted || calls != 0 || out.Kind() != executor.KindFailed) {
					t.Fatalf("pre-call failure: kind %s call_executed %v calls %d", out.Kind(), ev.CallExecuted, calls)
				}
				if post && (!ev.CallExecuted || calls != 1 || out.Kind() != executor.KindSucceeded) {
					t.Fatalf("post-call failure: kind %s call_executed %v calls %d", out.Kind(), ev.CallExecuted, calls)
				}
			})
		}
	}
}

// openCertifiable opens a certifiable boundary on r's policy and returns
// it with a context bound to it.
func (r *rig) openCertifiable(t *testing.T) (*executor.TaskBoundary, executor.ExecutionContext) {
	t.Helper()
	b, err := r.exec.OpenBoundary(r.ref(), true)
	if err != nil {
		t.Fatal(err)
	}
	return b, r.ctx(executor.ProfileCertifiable, b)
}

func TestGovernedCertificate(t *testing.T) {
	store := chain.NewMemStore()
	r := newRig(t, store, nil)
	b, ec := r.openCertifiable(t)
	kinds := []executor.OutcomeKind{}
	for i, a := range []string{"nothing", "echo", "fail", "write_note", "ambiguous"} {
		kinds = append(kinds, r.exec.Execute(context.Background(), req(fmt.Sprint(i), a, map[string]any{}), ec).Kind())
	}
	want := []executor.OutcomeKind{"succeeded", "denied", "failed", "escalated", "ambiguous"}
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	res, err := r.exec.CloseBoundary(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if res.Certificate == nil || res.Certificate.ProcessGrade != "FULL" {
		t.Fatalf("certificate %+v", res.Certificate)
	}
	if _, err := r.exec.CloseBoundary(context.Background(), b); !errors.Is(err, executor.ErrBoundaryClosed) {
		t.Fatalf("double close: %v", err)
	}
	out := r.exec.Execute(context.Background(), req("x", "nothing", nil), ec)
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != "boundary_closed" {
		t.Fatalf("after close: %s %s", out.Kind(), out.Base().ReasonCode)
	}
	vr, err := store.Verify(context.Background(), b.ChainID(), res.Head)
	if err != nil || !vr.OK() {
		t.Fatalf("chain does not verify: %v %+v", err, vr)
	}
}

func TestExceptionDegradesCertificate(t *testing.T) {
	r := newRig(t, chain.NewMemStore(), nil)
	b, _ := r.exec.OpenBoundary(r.ref(), true)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if err := b.Grant(executor.ExceptionGrant{GrantID: "00000000-0000-4000-8000-00000000ffff", GateID: "notes", ToolID: "write_note", Actor: "user:lead",
		ReasonCode: "incident_4711", IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	ec := r.ctx(executor.ProfileCertifiable, b)
	out := r.exec.Execute(context.Background(), req("1", "write_note", nil), ec)
	if out.Kind() != executor.KindSucceeded || !out.Base().Degraded {
		t.Fatalf("with exception: %s degraded=%v %+v", out.Kind(), out.Base().Degraded, out.Base().Trail)
	}
	// Single use: the next write_note escalates again.
	if out := r.exec.Execute(context.Background(), req("2", "write_note", nil), ec); out.Kind() != executor.KindEscalated {
		t.Fatalf("second use: %s", out.Kind())
	}
	res, err := r.exec.CloseBoundary(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if res.Certificate.ProcessGrade != "DEGRADED" || res.Certificate.GateSummary.ExceptionCount != 1 {
		t.Fatalf("certificate %+v", res.Certificate)
	}
}

func TestTransformThenRecheck(t *testing.T) {
	rewrite := executor.Transformer{Name: "rewrite", Transform: func(_ context.Context, action string, args map[string]any) (map[string]any, error) {
		args["text"] = "changed"
		return args, nil
	}}
	r := newRig(t, chain.NewMemStore(), func(c *executor.Config) {
		c.Transformers = []executor.Transformer{rewrite}
		c.Guards = []executor.Guard{{ID: "no_changed", Check: func(_ context.Context, n *normalize.Normalized) error { return nil }}}
	})
	b, _ := r.exec.OpenBoundary(r.ref(), false)
	out := r.exec.Execute(context.Background(), req("1", "nothing", map[string]any{"text": "orig"}), r.ctx(executor.ProfileGoverned, b))
	if out.Kind() != executor.KindSucceeded {
		t.Fatalf("got %s", out.Kind())
	}
	var rechecked bool
	for _, e := range out.Base().Trail {
		if e.Stage == 10 && e.Result == executor.TrailOK {
			rechecked = true
		}
	}
	if !rechecked {
		t.Fatalf("no recheck in trail %+v", out.Base().Trail)
	}
}

func TestGovernedConcurrencyKeepsOneLinearChain(t *testing.T) {
	store := chain.NewMemStore()
	r := newRig(t, store, func(c *executor.Config) { c.IDs = executor.NewUUID })
	b, _ := r.exec.OpenBoundary(r.ref(), true)
	ec := r.ctx(executor.ProfileCertifiable, b)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				if out := r.exec.Execute(context.Background(), req(fmt.Sprintf("%d-%d", g, i), "nothing", nil), ec); out.Kind() != executor.KindSucceeded {
					t.Errorf("%s", out.Kind())
				}
			}
		}()
	}
	wg.Wait()
	res, err := r.exec.CloseBoundary(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if r.calls["nothing"].Load() != 320 || res.Certificate == nil {
		t.Fatalf("calls %d, certificate %v", r.calls["nothing"].Load(), res.Certificate)
	}
}

// TestDurableProfileCommitsEveryAttempt runs the durable profile on the real
// SQLite store: every attempt, whatever its outcome, is committed once with
// its outcome and an outbox message.
func TestDurableProfileCommitsEveryAttempt(t *testing.T) {
	r, st := durableRig(t)
	ec := r.ctx(executor.ProfileDurable, nil)
	ec.Scope = executor.DurableRunScope{RunID: "run-1"}
	mk := func(id, action string) executor.ExecutionRequest {
		q := req(id, action, nil)
		q.Scope = ec.Scope
		return q
	}
	for _, c := range []struct {
		id, action string
		kind       executor.OutcomeKind
	}{{"a", "nothing", executor.KindSucceeded}, {"b", "fail", executor.KindFailed}, {"c", "write_note", executor.KindEscalated}, {"d", "nope", executor.KindDenied}} {
		out := r.exec.Execute(context.Background(), mk(c.id, c.action), ec)
		if out.Kind() != c.kind || out.Base().StateError != nil {
			t.Fatalf("%s: %s %v", c.id, out.Kind(), out.Base().StateError)
		}
		rec, ok, err := st.Attempt(context.Background(), out.Base().AttemptID)
		if err != nil || !ok || rec.Outcome != string(c.kind) || rec.RunID != "run-1" || len(rec.Outbox) != 1 {
			t.Fatalf("%s: committed %+v ok=%v err=%v", c.id, rec, ok, err)
		}
	}
	outbox, err := st.Outbox(context.Background(), "run-1")
	if err != nil || len(outbox) != 4 {
		t.Fatalf("outbox %d %v", len(outbox), err)
	}
	// An ephemeral scope cannot claim the durable profile.
	if out := r.exec.Execute(context.Background(), req("e", "nothing", nil), r.ctx(executor.ProfileDurable, nil)); out.Base().ReasonCode != "scope_not_durable" {
		t.Fatalf("ephemeral durable: %s", out.Base().ReasonCode)
	}
}

// TestTrailJSON: a trail's JSON names every stage (the name is derived,
// not stored), decodes back to the same entries, and a name that is not
// the stage's, a stage outside 1-14 or an unknown member is refused.
func TestTrailJSON(t *testing.T) {
	r := newRig(t, nil, nil)
	out := r.exec.Execute(context.Background(), req("r", "nothing", nil), r.ctx(executor.ProfileMinimal, nil))
	trail := out.Base().Trail
	b, err := json.Marshal(trail)
	if err != nil {
		t.Fatal(err)
	}
	var raw []map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != len(trail) || len(raw) < 13 {
		t.Fatalf("%d entries encoded, %d in the trail", len(raw), len(trail))
	}
	for i, m := range raw {
		if m["name"] != executor.StageNames[trail[i].Stage] || m["name"] == "" {
			t.Errorf("entry %d: name %v, stage %d", i, m["name"], trail[i].Stage)
		}
		if m["result"] != trail[i].Result.String() || m["result"] == "" {
			t.Errorf("entry %d: result %v, want %v", i, m["result"], trail[i].Result)
		}
	}
	// Every result has its own text, and decodes back from it.
	seen := map[string]bool{}
	for r := executor.TrailOK; r <= executor.TrailApproved; r++ {
		text := r.String()
		if text == "" || seen[text] {
			t.Fatalf("result %d: text %q", r, text)
		}
		seen[text] = true
		var e executor.TrailEntry
		if err := json.Unmarshal([]byte(`{"stage":13,"name":"terminal","result":"`+text+`"}`), &e); err != nil || e.Result != r {
			t.Fatalf("result %q: %+v %v", text, e, err)
		}
	}
	if (executor.TrailApproved + 1).String() != "" {
		t.Fatal("a result past the last has a text")
	}
	var back []executor.TrailEntry
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, trail) {
		t.Fatalf("round trip: %+v, want %+v", back, trail)
	}
	for _, bad := range []string{
		`{"stage":7,"name":"bind","result":"ok"}`,
		`{"stage":15,"name":"","result":"ok"}`,
		`{"stage":0,"name":"","result":"ok"}`,
		`{"stage":7,"name":"policy","result":"ok","extra":1}`,
		`{"stage":7,"result":"ok"}`,
		`{"stage":7,"name":"policy","result":"maybe"}`,
		`{"stage":7,"name":"policy","result":""}`,
	} {
		var e executor.TrailEntry
		if err := json.Unmarshal([]byte(bad), &e); err == nil {
			t.Errorf("%s: accepted as %+v", bad, e)
		}
	}
}

// TestPreflightRequestDigest: the preflight report's request digest is the
// request's (ExecutionRequest.Digest) in the minimal profile, which
// computes it when read, and in the governed one, which records it in
// operation_started; what the caller changes after Execute returns and
// what the callable changes in its arguments do not reach it; the
// report's JSON carries it.
func TestPreflightRequestDigest(t *testing.T) {
	store := chain.NewMemStore()
	r := newRig(t, store, func(c *executor.Config) {
		obj := `{"type":"object","properties":{"text":{"type":"string"},"n":{"type":"object"}},"additionalProperties":false}`
		if err := c.Registry.Register(normalize.ActionDescriptor{ID: "probe", Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
			Arguments: []byte(obj)}, func(_ context.Context, args map[string]any) (any, error) {
			args["text"] = "changed by the callable"
			if n, ok := args["n"].(map[string]any); ok {
				n["deep"] = false
			}
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	b, err := r.exec.OpenBoundary(r.ref(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, profile := range []executor.Profile{executor.ProfileMinimal, executor.ProfileGoverned} {
		for _, args := range []map[string]any{nil, {}, {"text": "hello", "n": map[string]any{"deep": true, "list": []any{1.5, "x"}}}} {
			claim := "agent:a"
			q := req("r-"+string(profile), "probe", args)
			q.PrincipalClaim = &claim
			q.Metadata = map[string]any{"approval": "g-1", "tags": []any{"a"}}
			q.Scope = executor.DurableRunScope{RunID: "run", OwnerAttemptID: &claim}
			ec := r.ctx(profile, b)
			ec.Scope = q.Scope
			want := q.Digest()
			out := r.exec.Execute(context.Background(), q, ec)
			if out.Kind() != executor.KindSucceeded {
				t.Fatalf("%s %v: %s %s", profile, args, out.Kind(), out.Base().ReasonCode)
			}
			// The caller changes everything it still holds.
			if args != nil {
				args["text"] = "changed by the caller"
				args["extra"] = 1
			}
			q.Metadata["approval"] = "g-2"
			claim = "agent:b"
			rep := out.Base().Preflight
			if got := rep.RequestDigest(); got != want {
				t.Errorf("%s %v: request digest %s, want %s", profile, args, got, want)
			}
			var m map[string]any
			js, err := json.Marshal(rep)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(js, &m); err != nil || m["request_digest"] != want || m["report_id"] != rep.ReportID {
				t.Errorf("%s: report JSON %s (%v)", profile, js, err)
			}
		}
	}
}

// TestPanicsAreContained: a panicking callable fails its attempt with the
// class callable_panic (governed: closed by callable_failed, the panic's
// text in no record); a panicking authorizer, guard or transformer
// refuses at its stage. Execute itself never panics for them.
func TestPanicsAreContained(t *testing.T) {
	secret := "s3cr3t-in-panic"
	store := chain.NewMemStore()
	r := newRig(t, store, func(c *executor.Config) {
		if err := c.Registry.Register(normalize.ActionDescriptor{ID: "probe", Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
			Arguments: []byte(`{"type":"object"}`)}, func(context.Context, map[string]any) (any, error) {
			panic(secret)
		}); err != nil {
			t.Fatal(err)
		}
	})
	b, err := r.exec.OpenBoundary(r.ref(), false)
	if err != nil {
		t.Fatal(err)
	}
	out := r.exec.Execute(context.Background(), req("p", "probe", nil), r.ctx(executor.ProfileGoverned, b))
	if f, ok := out.(*executor.Failed); !ok || f.Class != "callable_panic" || !out.Base().CallExecuted || out.Base().EvidenceError != nil {
		t.Fatalf("panicking callable: %s %+v", out.Kind(), out.Base())
	}
	lines := strings.Split(strings.TrimSpace(string(store.Export(b.ChainID()))), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, `"record_type":"callable_failed"`) || !strings.Contains(last, `callable_panic`) {
		t.Fatalf("terminal record %s", last)
	}
	if strings.Contains(string(store.Export(b.ChainID())), secret) {
		t.Fatal("the panic's text reached the evidence")
	}

	// An effect backend that panics before or after the call it was
	// given: the attempt fails with backend_panic, CallExecuted says
	// which, and the operation is closed.
	for _, callFirst := range []bool{false, true} {
		r, out, last := governedVia(t, funcBackend{"panicky", func(ctx context.Context, call func(context.Context) (any, error)) (any, error) {
			if callFirst {
				call(ctx)
			}
			panic("backend bug")
		}})
		if f, ok := out.(*executor.Failed); !ok || f.Class != "backend_panic" || out.Base().CallExecuted != callFirst || r.calls["nothing"].Load() != map[bool]int64{false: 0, true: 1}[callFirst] {
			t.Fatalf("panicking backend (call first %v): %s %+v", callFirst, out.Kind(), out.Base())
		}
		if !strings.Contains(last, `"record_type":"callable_failed"`) || !strings.Contains(last, `backend_panic`) {
			t.Fatalf("terminal record %s", last)
		}
	}

	boom := func() { panic(secret) }
	for _, c := range []struct {
		name, reason string
		mutate       func(*executor.Config)
	}{
		{"authorizer", "unauthorized", func(c *executor.Config) {
			c.Authorize = func(context.Context, executor.ExecutionContext, normalize.ActionDescriptor) error { boom(); return nil }
		}},
		{"guard", "guard:g", func(c *executor.Config) {
			c.Guards = []executor.Guard{{ID: "g", Check: func(context.Context, *normalize.Normalized) error { boom(); return nil }}}
		}},
		{"transformer", "transform_failed:t", func(c *executor.Config) {
			c.Transformers = []executor.Transformer{{Name: "t", Transform: func(context.Context, string, map[string]any) (map[string]any, error) {
				boom()
				return nil, nil
			}}}
		}},
	} {
		r := newRig(t, nil, c.mutate)
		out := r.exec.Execute(context.Background(), req("q", "nothing", nil), r.ctx(executor.ProfileMinimal, nil))
		if out.Kind() != executor.KindDenied || out.Base().ReasonCode != c.reason || out.Base().CallExecuted || r.calls["nothing"].Load() != 0 {
			t.Errorf("panicking %s: %s %q called=%v", c.name, out.Kind(), out.Base().ReasonCode, out.Base().CallExecuted)
		}
	}
}

// TestIdempotencyKeyReachesCallable: the request's IdempotencyKey, the
// same across retries, reaches the callable while each retry's attempt id
// differs; a request without one gives none, and the key is in the
// request digest the evidence carries.
func TestIdempotencyKeyReachesCallable(t *testing.T) {
	type seen struct {
		key, attempt string
		hasKey       bool
	}
	var got []seen
	r := newRig(t, nil, func(c *executor.Config) {
		c.IDs = executor.NewUUID
		c.Registry.Register(normalize.ActionDescriptor{ID: "probe", Version: "1", Arguments: []byte(`{"type":"object"}`)},
			func(ctx context.Context, _ map[string]any) (any, error) {
				k, ok := executor.IdempotencyKeyFromContext(ctx)
				id, _ := executor.AttemptFromContext(ctx)
				got = append(got, seen{k, id, ok})
				return nil, nil
			})
	})
	ec := r.ctx(executor.ProfileMinimal, nil)
	first := req("r1", "probe", nil)
	first.IdempotencyKey = "order-42"
	retry := req("r2", "probe", nil)
	retry.IdempotencyKey = "order-42"
	none := req("r3", "probe", nil)
	for _, rq := range []executor.ExecutionRequest{first, retry, none} {
		if out := r.exec.Execute(context.Background(), rq, ec); out.Kind() != executor.KindSucceeded {
			t.Fatalf("%s: %s %s", rq.RequestID, out.Kind(), out.Base().ReasonCode)
		}
	}
	if len(got) != 3 {
		t.Fatalf("callable ran %d times, want 3", len(got))
	}
	if !got[0].hasKey || got[0].key != "order-42" || !got[1].hasKey || got[1].key != "order-42" {
		t.Errorf("retries saw keys %+v, %+v; want order-42 both", got[0], got[1])
	}
	if got[0].attempt == got[1].attempt {
		t.Errorf("two attempts share the attempt id %s", got[0].attempt)
	}
	if got[2].hasKey {
		t.Errorf("a request without a key gave the callable %q", got[2].key)
	}
	if _, ok := executor.IdempotencyKeyFromContext(context.Background()); ok {
		t.Error("a context Execute did not make has a key")
	}
	other := first
	other.IdempotencyKey = "order-43"
	if first.Digest() == other.Digest() {
		t.Error("the request digest does not cover the idempotency key")
	}
}
