package executor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"polc.dev/polc/normalize"
)

// Callable is an action's implementation. The executor calls it at most
// once per attempt, at stage 12, with the final validated arguments. A
// Callable that cannot tell whether its external effect happened returns an
// error wrapping ErrAmbiguous.
//
// Its result should be a JSON value (Succeeded.ResultDigest binds its
// canonical form): a result without one (NaN, a chan) still succeeds, but
// its digest names the encoding error, not the result. Its error should
// carry an ErrorClass of the documented grammar ([a-z0-9_.], 1 to 64
// characters); any other error fails with the class "callable_error", and
// the error's text is kept nowhere.
type Callable func(ctx context.Context, args map[string]any) (any, error)

// ErrAmbiguous marks a callable error whose external effect is unknown (the
// transport died after sending): the outcome is Ambiguous and the attempt is
// never retried.
var ErrAmbiguous = fmt.Errorf("external result ambiguous")

// Registry is the ActionManager: it registers descriptors with their
// callables and resolves references to descriptors. It has no method that
// invokes anything; only the Executor reaches a callable, through a
// one-use token at stage 12. Its descriptors live in a normalize.Catalog
// (Catalog), so a Normalizer over it resolves exactly what the executor
// runs.
type Registry struct {
	mu      sync.RWMutex
	catalog *normalize.Catalog
	entries map[string]*entry // by action id
}

type entry struct {
	action *normalize.Action
	fn     Callable

	lastPlan atomic.Pointer[plan] // the plan of its last attempt (Executor.planFor)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{catalog: normalize.NewCatalog(), entries: map[string]*entry{}}
}

// BuiltinRegistry returns a registry of the built-in descriptors without
// callables: enough to normalize requests (polc eval, normalize, test).
// Executing one of its actions is denied (no_callable).
func BuiltinRegistry() *Registry {
	r := NewRegistry()
	for _, d := range normalize.BuiltinDescriptors() {
		if err := r.Register(d, nil); err != nil {
			panic("executor: built-in descriptor: " + err.Error())
		}
	}
	return r
}

// Catalog is the registry's descriptors, for a normalize.Normalizer. It
// grows as the registry does.
func (r *Registry) Catalog() *normalize.Catalog { return r.catalog }

// Register adds an action: d as normalize.Catalog.Add accepts it, with
// its callable fn (nil for descriptor-only registries). Every Containment
// class must be one of ContainmentClasses.
func (r *Registry) Register(d normalize.ActionDescriptor, fn Callable) error {
	for _, c := range d.Containment {
		if !slices.Contains(ContainmentClasses, c) {
			// Refused here, where the author sees it, rather than as
			// containment_unsupported on every call.
			return fmt.Errorf("register %s: containment %q is not one of %s", d.ID, c, strings.Join(ContainmentClasses, ", "))
		}
	}
	// Held across the catalog's Add: lookup finds an action in the
	// catalog only once its entry (and callable) is in place.
	r.mu.Lock()
	defer r.mu.Unlock()
	a, err := r.catalog.Add(d)
	if err != nil {
		return err
	}
	r.entries[a.ID()] = &entry{action: a, fn: fn}
	return nil
}

// Resolve returns a copy of the descriptor a reference (id or alias) names.
// The copy shares no memory with the registry.
func (r *Registry) Resolve(ref string) (normalize.ActionDescriptor, bool) {
	return r.catalog.Resolve(ref)
}

func (r *Registry) lookup(ref string) *entry {
	a := r.catalog.Lookup(ref)
	if a == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.entries[a.ID()]
}
