package executor

import (
	"context"
	"os"
	"os/exec"

	"polc.dev/polc/decision"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// ContainmentDegraded is a capability level between enforced and
// unsupported: the backend holds the class only in part, and the report's
// Reasons say which part it cannot hold. Admission treats it as not
// enforced: an action that requires the class is denied.
const ContainmentDegraded = "degraded"

// Invocation is what Execute tells a ContainingBackend about the call it
// is about to run: the policy that allowed it, the workspace the policy
// judged it in and the normalized request. The backend derives what it
// contains from these; it must not modify them.
type Invocation struct {
	// ActionID is the action's canonical id.
	ActionID string
	// Policy is the snapshot that allowed the call.
	Policy *snapshot.Snapshot
	// Decider is Policy compiled: what a backend asks about a
	// destination or a path judges it as stage 7 did.
	Decider *decision.Policy
	// Workspace is the trusted context's workspace (absolute).
	Workspace string
	// Request is the request as stage 2 normalized it.
	Request *normalize.Normalized
}

// ContainingBackend is an EffectBackend that holds what a callable starts
// to the policy. Execute calls InvokeContained instead of Invoke, with the
// call's Invocation; the backend gives the callable a Spawner through the
// context (WithSpawner), and the callable starts its subprocesses with it.
// A callable that starts a process without the context's Spawner is not
// contained: the built-in callables (package builtin) always use it.
type ContainingBackend interface {
	EffectBackend
	// InvokeContained runs call exactly once, as Invoke does, contained
	// to inv.
	InvokeContained(ctx context.Context, inv *Invocation, call func(context.Context) (any, error)) (any, error)
}

// Spawner starts a callable's subprocesses under its backend's
// containment.
type Spawner interface {
	// Command returns a command that runs argv (argv[0] a path or a name
	// looked up in env's PATH) in dir with exactly env, contained; the
	// process gets extra[i] as descriptor 3+i (a Spawner that cannot pass
	// them refuses). The caller may set the command's Stdin, Stdout,
	// Stderr and SysProcAttr.Setsid, must not replace its ExtraFiles, and
	// must start it (Start or Run) at most once.
	Command(ctx context.Context, argv []string, dir string, env []string, extra []*os.File) (*exec.Cmd, error)
}

type spawnerKey struct{}

// WithSpawner returns ctx carrying s, for a ContainingBackend to give a
// callable.
func WithSpawner(ctx context.Context, s Spawner) context.Context {
	return context.WithValue(ctx, spawnerKey{}, s)
}

// SpawnerFromContext returns the Spawner a ContainingBackend put in the
// callable's context. Without one, the backend contains nothing and the
// callable starts processes as it would anyway.
func SpawnerFromContext(ctx context.Context) (Spawner, bool) {
	s, ok := ctx.Value(spawnerKey{}).(Spawner)
	return s, ok && s != nil
}
