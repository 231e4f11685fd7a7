package executor

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"polc.dev/polc/normalize"
)

// TestConcurrentRegisterAndLookup registers actions while other goroutines
// look them up through the registry and through its catalog: an action the
// catalog already resolves must always have its entry (and callable) in the
// registry, or stage 1 would deny an action the normalizer accepted.
func TestConcurrentRegisterAndLookup(t *testing.T) {
	r := NewRegistry()
	const n = 200
	fn := func(context.Context, map[string]any) (any, error) { return nil, nil }
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			d := normalize.ActionDescriptor{ID: fmt.Sprintf("act%d", i), Version: "1",
				Aliases:   []string{fmt.Sprintf("alias%d", i)},
				Arguments: []byte(`{"type":"object"}`)}
			if err := r.Register(d, fn); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				for _, ref := range []string{fmt.Sprintf("act%d", i), fmt.Sprintf("alias%d", i)} {
					for {
						a := r.Catalog().Lookup(ref)
						if a == nil {
							continue // not registered yet
						}
						e := r.lookup(ref)
						if e == nil || e.fn == nil || e.action != a {
							t.Errorf("%s: the catalog resolves it but the registry has %+v", ref, e)
						}
						break
					}
				}
			}
		}()
	}
	wg.Wait()
}
