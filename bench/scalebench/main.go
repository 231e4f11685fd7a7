// Command scalebench is one executor process of bench/scale.sh: governed
// operations (a callable that does nothing) from many callers into task
// boundaries of its own, on a file store or PostgreSQL, for a fixed time.
// It prints one JSON line: operations, elapsed seconds, latency
// percentiles and the store's records per commit.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
	"polc.dev/polc/pgstore"
	"polc.dev/polc/snapshot"
)

func main() {
	store := flag.String("store", "", "evidence directory or postgres:// DSN")
	snapPath := flag.String("snapshot", "bench/executorbench/testdata/snapshot.json", "snapshot allowing the action \"nothing\"")
	callers := flag.Int("callers", 16, "concurrent callers")
	boundaries := flag.Int("boundaries", 4, "task boundaries (chains) the callers share")
	dur := flag.Duration("duration", 5*time.Second, "how long to run")
	flag.Parse()
	if err := run(*store, *snapPath, *callers, *boundaries, *dur); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

func run(storeArg, snapPath string, callers, boundaries int, dur time.Duration) error {
	ctx := context.Background()
	var (
		store     chain.Store
		perCommit func() float64
		commitMS  func() float64
	)
	if pgstore.IsDSN(storeArg) {
		s, err := pgstore.OpenEvidence(ctx, storeArg, pgstore.EvidenceOptions{})
		if err != nil {
			return err
		}
		defer s.Close()
		store, perCommit = s, func() float64 { return s.Stats().RecordsPerGroup() }
		commitMS = func() float64 {
			st := s.Stats()
			return st.CommitTime.Seconds() * 1000 / float64(max(st.Groups, 1))
		}
	} else {
		s, err := chain.OpenFileStore(storeArg)
		if err != nil {
			return err
		}
		defer s.Close()
		store, perCommit = s, func() float64 { return s.Stats().RecordsPerGroup() }
		commitMS = func() float64 { return s.Stats().MeanSync().Seconds() * 1000 }
	}
	data, err := os.ReadFile(snapPath)
	if err != nil {
		return err
	}
	snap, err := snapshot.Parse(data)
	if err != nil {
		return err
	}
	reg := executor.NewRegistry()
	if err := reg.Register(normalize.ActionDescriptor{ID: "nothing", Version: "1", Source: normalize.Source{Kind: "sdk", Ref: "bench"},
		Arguments: []byte(`{"type":"object","additionalProperties":false}`)},
		func(context.Context, map[string]any) (any, error) { return nil, nil }); err != nil {
		return err
	}
	ex, err := executor.New(executor.Config{Registry: reg, Policies: []*snapshot.Snapshot{snap}, Evidence: store, IDs: executor.NewUUID, Now: time.Now})
	if err != nil {
		return err
	}
	ref := executor.SnapshotRef{PolicyID: snap.PolicyID, Version: snap.Version, Digest: snap.Digest}
	var ecs []executor.ExecutionContext
	var bds []*executor.TaskBoundary
	for range boundaries {
		bd, err := ex.OpenBoundary(ref, false)
		if err != nil {
			return err
		}
		bds = append(bds, bd)
		ecs = append(ecs, executor.ExecutionContext{ContextID: executor.NewUUID(), Scope: executor.EphemeralScope{ID: "s"},
			Principal: executor.Principal{Kind: "agent", ID: "a"}, Tenant: "acme", Workspace: "/ws", Policy: ref,
			Backend: "inprocess", Profile: executor.ProfileGoverned, Boundary: bd})
	}
	var (
		mu      sync.Mutex
		lat     []time.Duration
		failed  atomic.Int64
		n       atomic.Int64
		wg      sync.WaitGroup
		stopped atomic.Bool
	)
	start := time.Now()
	time.AfterFunc(dur, func() { stopped.Store(true) })
	for i := range callers {
		wg.Go(func() {
			var mine []time.Duration
			for !stopped.Load() {
				t0 := time.Now()
				out := ex.Execute(ctx, executor.ExecutionRequest{RequestID: fmt.Sprint(n.Add(1)), Action: "nothing",
					Arguments: map[string]any{}, Scope: executor.EphemeralScope{ID: "s"}}, ecs[i%len(ecs)])
				if out.Kind() != executor.KindSucceeded {
					failed.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start)
	for _, bd := range bds {
		if _, err := ex.CloseBoundary(ctx, bd); err != nil {
			return err
		}
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"ops": len(lat), "failed": failed.Load(), "seconds": el.Seconds(),
		"p50_us": pct(0.50), "p99_us": pct(0.99), "records_per_commit": perCommit(), "commit_ms": commitMS()})
}
