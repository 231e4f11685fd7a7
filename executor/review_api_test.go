package executor_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
)

// stage3 is the attempt's stage-3 trail entry (the zero entry if none).
func stage3(out executor.Outcome) executor.TrailEntry {
	for _, e := range out.Base().Trail {
		if e.Stage == 3 {
			return e
		}
	}
	return executor.TrailEntry{}
}

// TestEmptyBackendIsNamedAsSuch: ExecutionContext.Backend has no default
// (the composition root chooses what contains the callable), so an empty
// one stays denied; but the detail said `no effect backend ""`, which
// reads like a backend named "" is missing. It now says that the context
// named none, and names the default backend.
func TestEmptyBackendIsNamedAsSuch(t *testing.T) {
	r := newRig(t, nil, nil)
	ec := r.ctx(executor.ProfileMinimal, nil)
	ec.Backend = ""
	out := r.exec.Execute(context.Background(), req("1", "nothing", nil), ec)
	e := stage3(out)
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != "unknown_backend" || out.Base().CallExecuted {
		t.Fatalf("got %s %q call_executed %v", out.Kind(), out.Base().ReasonCode, out.Base().CallExecuted)
	}
	if !strings.Contains(e.Detail, "no backend named in the ExecutionContext") || !strings.Contains(e.Detail, `"inprocess"`) {
		t.Fatalf("stage 3 detail %q", e.Detail)
	}
	ec.Backend = "sandbox"
	out = r.exec.Execute(context.Background(), req("2", "nothing", nil), ec)
	if d := stage3(out).Detail; out.Base().ReasonCode != "unknown_backend" || !strings.Contains(d, `"sandbox"`) {
		t.Fatalf("got %q, stage 3 detail %q", out.Base().ReasonCode, d)
	}
}

// TestInProcessBackendName: the constant is the default backend's ID, and
// a context naming it runs the callable.
func TestInProcessBackendName(t *testing.T) {
	if id := (executor.InProcessBackend{}).ID(); id != executor.InProcessBackendName {
		t.Fatalf("InProcessBackend.ID() = %q, InProcessBackendName = %q", id, executor.InProcessBackendName)
	}
	r := newRig(t, nil, nil)
	ec := r.ctx(executor.ProfileMinimal, nil)
	ec.Backend = executor.InProcessBackendName
	if out := r.exec.Execute(context.Background(), req("1", "nothing", nil), ec); out.Kind() != executor.KindSucceeded {
		t.Fatalf("got %s %q", out.Kind(), out.Base().ReasonCode)
	}
}

// TestUnpinnedPolicyDetail: a context without a Policy was refused with
// the detail "policy @ is not loaded". The reason code stays
// policy_digest_mismatch (the pin matches no loaded snapshot); the
// detail now says what is wrong with the pin.
func TestUnpinnedPolicyDetail(t *testing.T) {
	r := newRig(t, nil, nil)
	cases := []struct {
		name string
		ref  executor.SnapshotRef
		want string
	}{
		{"zero", executor.SnapshotRef{}, "the context pins no policy"},
		{"unknown", executor.SnapshotRef{PolicyID: "other", Version: "9", Digest: r.snap.Digest}, `policy "other" version "9" is not among Config.Policies`},
		{"no digest", executor.SnapshotRef{PolicyID: r.snap.PolicyID, Version: r.snap.Version}, "the context pins no digest"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ec := r.ctx(executor.ProfileMinimal, nil)
			ec.Policy = c.ref
			out := r.exec.Execute(context.Background(), req(string(rune('1'+i)), "nothing", nil), ec)
			d := stage3(out).Detail
			if out.Kind() != executor.KindDenied || out.Base().ReasonCode != "policy_digest_mismatch" || !strings.Contains(d, c.want) {
				t.Fatalf("got %s %q, stage 3 detail %q; want detail with %q", out.Kind(), out.Base().ReasonCode, d, c.want)
			}
		})
	}
	g := newRig(t, chain.NewMemStore(), nil)
	if _, err := g.exec.OpenBoundary(executor.SnapshotRef{}, false); err == nil || !strings.Contains(err.Error(), "pins no policy") {
		t.Fatalf("OpenBoundary(zero ref): %v", err)
	}
}

// TestSnapshotRefOf: the helper pins exactly the snapshot, and a nil one
// pins nothing (refused at stage 3).
func TestSnapshotRefOf(t *testing.T) {
	r := newRig(t, nil, nil)
	if got := executor.SnapshotRefOf(r.snap); got != r.ref() {
		t.Fatalf("SnapshotRefOf = %+v, want %+v", got, r.ref())
	}
	if got := executor.SnapshotRefOf(nil); got != (executor.SnapshotRef{}) {
		t.Fatalf("SnapshotRefOf(nil) = %+v", got)
	}
	ec := r.ctx(executor.ProfileMinimal, nil)
	ec.Policy = executor.SnapshotRefOf(r.snap)
	if out := r.exec.Execute(context.Background(), req("1", "nothing", nil), ec); out.Kind() != executor.KindSucceeded {
		t.Fatalf("got %s %q", out.Kind(), out.Base().ReasonCode)
	}
}

// TestNegativeTimeoutRefused: a negative Timeout skipped the deadline
// (context.WithTimeout was only called for a positive one), so an
// unchecked subtraction ran the callable unbounded. It is now an invalid
// request at stage 3, before any lease is taken or the callable reached.
func TestNegativeTimeoutRefused(t *testing.T) {
	r := newRig(t, nil, nil)
	ec := r.ctx(executor.ProfileMinimal, nil)
	q := req("1", "nothing", nil)
	q.Timeout = -time.Second
	out := r.exec.Execute(context.Background(), q, ec)
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != normalize.ReasonInvalidRequest || out.Base().CallExecuted ||
		out.Base().Preflight != nil || !strings.Contains(stage3(out).Detail, "negative timeout") {
		t.Fatalf("got %s %q call_executed %v, stage 3 %+v", out.Kind(), out.Base().ReasonCode, out.Base().CallExecuted, stage3(out))
	}
	if n := r.calls["nothing"].Load(); n != 0 {
		t.Fatalf("the callable ran %d times", n)
	}
	q.RequestID, q.Timeout = "2", 0
	if out := r.exec.Execute(context.Background(), q, ec); out.Kind() != executor.KindSucceeded {
		t.Fatalf("zero timeout: got %s %q", out.Kind(), out.Base().ReasonCode)
	}
}

// TestRegisterRefusesUnknownContainment: a misspelt containment class
// ("filesytem") was registered, and every call was then denied as
// containment_unsupported, far from the typo. Register refuses it; every
// listed class is accepted.
func TestRegisterRefusesUnknownContainment(t *testing.T) {
	desc := func(id string, classes ...string) normalize.ActionDescriptor {
		return normalize.ActionDescriptor{ID: id, Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
			Arguments: []byte(`{"type":"object"}`), Containment: classes}
	}
	reg := executor.NewRegistry()
	for _, bad := range []string{"filesytem", "", "Filesystem"} {
		err := reg.Register(desc("a", "network", bad), nil)
		if err == nil || !strings.Contains(err.Error(), "containment") {
			t.Fatalf("containment %q: err = %v", bad, err)
		}
	}
	if _, ok := reg.Resolve("a"); ok {
		t.Fatal("a refused descriptor was registered")
	}
	if err := reg.Register(desc("b", executor.ContainmentClasses...), nil); err != nil {
		t.Fatalf("every listed class: %v", err)
	}
}

// TestLimiterDefaults pins the documented defaults: LeaseTTL 0 is
// DefaultLeaseTTL, nil IDs an empty lease id, and New's own Limiter takes
// its ids from Config.IDs.
func TestLimiterDefaults(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l, _, ok := (&executor.Limiter{}).Acquire(context.Background(), now)
	if !ok || !l.ExpiresAt.Equal(now.Add(executor.DefaultLeaseTTL)) || l.ID != "" {
		t.Fatalf("zero Limiter: ok %v lease %+v", ok, l)
	}
	r := newRig(t, nil, nil)
	out := r.exec.Execute(context.Background(), req("1", "nothing", nil), r.ctx(executor.ProfileMinimal, nil))
	if pf := out.Base().Preflight; pf == nil || pf.LeaseID == "" || !pf.ExpiresAt.Equal(now.Add(executor.DefaultLeaseTTL)) {
		t.Fatalf("default admission: preflight %+v", pf)
	}
}

// classed is an error with a chosen class.
type classed string

func (c classed) Error() string      { return "secret detail" }
func (c classed) ErrorClass() string { return string(c) }

// TestErrorClassGrammar pins the documented grammar: [a-z0-9_.], 1 to 64
// characters; anything else becomes callable_error. And a result without
// a canonical form still succeeds (the effect happened).
func TestErrorClassGrammar(t *testing.T) {
	var class classed
	var result any
	r := newRig(t, nil, func(c *executor.Config) {
		if err := c.Registry.Register(normalize.ActionDescriptor{ID: "probe", Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
			Arguments: []byte(`{"type":"object"}`)}, func(context.Context, map[string]any) (any, error) {
			if class != "" {
				return nil, class
			}
			return result, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	ec := r.ctx(executor.ProfileMinimal, nil)
	for i, c := range []struct{ class, want string }{
		{"quota_exceeded", "quota_exceeded"},
		{"http.status_503", "http.status_503"},
		{strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{strings.Repeat("a", 65), "callable_error"},
		{"Quota", "callable_error"},
		{"quota exceeded", "callable_error"},
		{"quota-exceeded", "callable_error"},
	} {
		class = classed(c.class)
		out := r.exec.Execute(context.Background(), req(string(rune('a'+i)), "probe", nil), ec)
		f, ok := out.(*executor.Failed)
		if !ok || f.Class != c.want || f.ReasonCode != c.want {
			t.Fatalf("class %q: got %s %q, want failed %q", c.class, out.Kind(), out.Base().ReasonCode, c.want)
		}
	}
	class = ""
	for i, res := range []any{math.NaN(), make(chan int)} {
		result = res
		out := r.exec.Execute(context.Background(), req(string(rune('A'+i)), "probe", nil), ec)
		s, ok := out.(*executor.Succeeded)
		if !ok || len(s.ResultDigest) != 64 {
			t.Fatalf("unencodable result %T: got %s %q", res, out.Kind(), out.Base().ReasonCode)
		}
	}
}

// TestSchemaDetailHasNoEmptyPointer: a schema error on the arguments
// object itself has the empty JSON pointer as its location, and the
// detail read "arguments of probe: : missing properties: 'to'". The
// location is given only when there is one.
func TestSchemaDetailHasNoEmptyPointer(t *testing.T) {
	r := newRig(t, nil, func(c *executor.Config) {
		if err := c.Registry.Register(normalize.ActionDescriptor{ID: "probe", Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "test"},
			Arguments: []byte(`{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`)},
			func(context.Context, map[string]any) (any, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
	})
	ec := r.ctx(executor.ProfileMinimal, nil)
	for i, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, "arguments of probe: missing properties: 'to'"},
		{map[string]any{"to": 1}, "arguments of probe: /to: "},
	} {
		out := r.exec.Execute(context.Background(), req(string(rune('1'+i)), "probe", c.args), ec)
		var d string
		for _, e := range out.Base().Trail {
			if e.Stage == 2 {
				d = e.Detail
			}
		}
		if out.Base().ReasonCode != normalize.ReasonInvalidRequest || strings.Contains(d, ": :") || !strings.HasPrefix(d, c.want) {
			t.Fatalf("arguments %v: got %q, stage 2 detail %q, want it to start with %q", c.args, out.Base().ReasonCode, d, c.want)
		}
	}
}
