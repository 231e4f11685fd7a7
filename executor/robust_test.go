package executor_test

import (
	"context"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// cyclicValues are values with no end: a map and a list that contain
// themselves, and one nested deeper than any JSON a parser accepts.
func cyclicValues() map[string]any {
	m := map[string]any{}
	m["self"] = m
	l := []any{nil}
	l[0] = l
	deep := map[string]any{}
	for range 5000 {
		deep = map[string]any{"d": deep}
	}
	return map[string]any{"map": m, "list": l, "deep": deep}
}

// TestValuesWithoutCanonicalFormAreRefused: arguments or metadata that
// are cyclic, too deep, NaN or a func are refused at stage 2 with
// invalid_request (the request digest could not bind them), in every
// profile, before the callable; a callable's cyclic result does not
// crash the digest of the result; the public digest and normalizer
// return instead of recursing forever.
func TestValuesWithoutCanonicalFormAreRefused(t *testing.T) {
	store := chain.NewMemStore()
	var probed atomic.Int64
	r := newRig(t, store, func(c *executor.Config) {
		// probe takes any arguments (only their canonical form can refuse
		// them) and returns a cyclic value.
		if err := c.Registry.Register(normalize.ActionDescriptor{ID: "probe", Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
			Arguments: []byte(`{"type":"object"}`)}, func(context.Context, map[string]any) (any, error) {
			probed.Add(1)
			return cyclicValues()["map"], nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	b, err := r.exec.OpenBoundary(r.ref(), false)
	if err != nil {
		t.Fatal(err)
	}
	bad := cyclicValues()
	bad["nan"] = math.NaN()
	bad["chan"] = make(chan int)
	bad["func"] = func() {}
	for _, profile := range []executor.Profile{executor.ProfileMinimal, executor.ProfileGoverned} {
		ec := r.ctx(profile, b)
		for name, v := range bad {
			for _, where := range []string{"arguments", "metadata"} {
				q := req("q-"+name, "probe", nil)
				if where == "arguments" {
					q.Arguments = map[string]any{"text": "x", "v": v}
				} else {
					q.Metadata = map[string]any{"v": v}
				}
				out := r.exec.Execute(context.Background(), q, ec)
				if out.Kind() != executor.KindDenied || out.Base().ReasonCode != normalize.ReasonInvalidRequest || out.Base().CallExecuted {
					t.Errorf("%s: %s in %s: %s %q", profile, name, where, out.Kind(), out.Base().ReasonCode)
				}
			}
		}
	}
	if probed.Load() != 0 {
		t.Fatalf("the callable ran %d times", probed.Load())
	}
	// The same arguments without the bad value pass, and the callable's
	// cyclic result has a digest: the refusals above are the values'.
	for _, profile := range []executor.Profile{executor.ProfileMinimal, executor.ProfileGoverned} {
		out := r.exec.Execute(context.Background(), req("ok", "probe", map[string]any{"text": "x"}), r.ctx(profile, b))
		if out.Kind() != executor.KindSucceeded || len(out.(*executor.Succeeded).ResultDigest) != 64 {
			t.Fatalf("%s: plain arguments: %s %s", profile, out.Kind(), out.Base().ReasonCode)
		}
	}
	q := req("d", "nothing", nil)
	q.Metadata = bad
	if d := q.Digest(); len(d) != 64 {
		t.Fatalf("Digest of a cyclic request: %q", d)
	}
	reg := executor.BuiltinRegistry()
	if err := reg.Register(normalize.ActionDescriptor{ID: "anything", Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
		Arguments: []byte(`{"type":"object"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	n := normalize.Normalizer{Catalog: reg.Catalog()}
	for name, v := range bad {
		for _, a := range []normalize.ActionRequest{
			{Action: "read_file", Arguments: map[string]any{"path": v}},
			{Action: "mcp:github/create_issue", Arguments: map[string]any{"body": v}},
			{Action: "anything", Arguments: map[string]any{"v": v}},
		} {
			a.Principal, a.Tenant, a.Workspace = "agent:a", "acme", "/ws"
			if _, nerr := n.Normalize(a); nerr == nil {
				t.Errorf("Normalize accepted %s in %s", name, a.Action)
			}
		}
	}
}

// TestForeignBoundariesAndBadConfig: a task boundary the executor did not
// open (a zero value, another executor's) is refused before any record
// (boundary_foreign) and cannot be closed; New refuses nil snapshots and
// backends and a snapshot given twice instead of panicking or keeping one.
func TestForeignBoundariesAndBadConfig(t *testing.T) {
	store := chain.NewMemStore()
	r := newRig(t, store, nil)
	other := newRig(t, store, nil)
	theirs, err := other.exec.OpenBoundary(other.ref(), false)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*executor.TaskBoundary{"zero": {}, "other executor's": theirs} {
		for _, profile := range []executor.Profile{executor.ProfileGoverned, executor.ProfileCertifiable} {
			out := r.exec.Execute(context.Background(), req("f", "nothing", nil), r.ctx(profile, b))
			if out.Kind() != executor.KindDenied || out.Base().ReasonCode != "boundary_foreign" || len(out.Base().Records) != 0 {
				t.Errorf("%s boundary, %s: %s %q", name, profile, out.Kind(), out.Base().ReasonCode)
			}
		}
		if _, err := r.exec.CloseBoundary(context.Background(), b); err == nil {
			t.Errorf("closed the %s boundary", name)
		}
	}
	if _, err := r.exec.CloseBoundary(context.Background(), nil); err == nil {
		t.Error("closed a nil boundary")
	}
	if r.calls["nothing"].Load() != 0 {
		t.Fatal("the callable ran")
	}
	// The other executor still owns and closes its boundary.
	if _, err := other.exec.CloseBoundary(context.Background(), theirs); err != nil {
		t.Fatal(err)
	}

	reg := executor.NewRegistry()
	for name, cfg := range map[string]executor.Config{
		"nil snapshot": {Registry: reg, Policies: []*snapshot.Snapshot{nil}},
		"nil backend":  {Registry: reg, Backends: []executor.EffectBackend{nil}},
		"twice":        {Registry: reg, Policies: []*snapshot.Snapshot{r.snap, r.snap}},
	} {
		if _, err := executor.New(cfg); err == nil {
			t.Errorf("New accepted a config with a %s", name)
		}
	}
}

// funcBackend is an in-process backend (its capability report, under
// its own id) whose Invoke is invoke.
type funcBackend struct {
	id     string
	invoke func(ctx context.Context, call func(context.Context) (any, error)) (any, error)
}

func (b funcBackend) ID() string { return b.id }
func (b funcBackend) Probe(ctx context.Context) (executor.BackendCapabilityReport, error) {
	r, err := executor.InProcessBackend{}.Probe(ctx)
	r.BackendID = b.id
	return r, err
}
func (b funcBackend) Invoke(ctx context.Context, call func(context.Context) (any, error)) (any, error) {
	return b.invoke(ctx, call)
}

// governedVia runs one governed attempt of "nothing" through backend and
// returns the rig, the outcome and the last record of the chain.
func governedVia(t *testing.T, backend funcBackend) (*rig, executor.Outcome, string) {
	t.Helper()
	store := chain.NewMemStore()
	r := newRig(t, store, func(c *executor.Config) { c.Backends = []executor.EffectBackend{backend} })
	b, err := r.exec.OpenBoundary(r.ref(), false)
	if err != nil {
		t.Fatal(err)
	}
	ec := r.ctx(executor.ProfileGoverned, b)
	ec.Backend = backend.id
	out := r.exec.Execute(context.Background(), req("via", "nothing", nil), ec)
	lines := strings.Split(strings.TrimSpace(string(store.Export(b.ChainID()))), "\n")
	return r, out, lines[len(lines)-1]
}

// TestBackendCannotKeepTheCall: a backend that returns success without
// making the call fails the attempt (backend_skipped_call, CallExecuted
// false, governed: closed by callable_failed), and the call it kept does
// not reach the callable afterwards.
func TestBackendCannotKeepTheCall(t *testing.T) {
	var kept func(context.Context) (any, error)
	r, out, last := governedVia(t, funcBackend{"keeper", func(_ context.Context, call func(context.Context) (any, error)) (any, error) {
		kept = call
		return "fine", nil
	}})
	if f, ok := out.(*executor.Failed); !ok || f.Class != "backend_skipped_call" || out.Base().CallExecuted {
		t.Fatalf("%s %+v", out.Kind(), out.Base())
	}
	if !strings.Contains(last, `"record_type":"callable_failed"`) || !strings.Contains(last, "backend_skipped_call") {
		t.Fatalf("terminal record %s", last)
	}
	if kept == nil {
		t.Fatal("the backend kept no call")
	}
	if _, err := kept(context.Background()); err == nil || r.calls["nothing"].Load() != 0 {
		t.Fatalf("the kept call ran after the attempt: %v, %d calls", err, r.calls["nothing"].Load())
	}
}
