package pgstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"polc.dev/polc/chain"
	"polc.dev/polc/chain/storetest"
	"polc.dev/polc/internal/pgtest"
	"polc.dev/polc/pgstore"
)

// acked is what writers were told is durable: chain → sequence → hash.
type acked struct {
	mu sync.Mutex
	m  map[string]map[int64]chain.Hash
}

func (a *acked) add(rc chain.AppendReceipt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]map[int64]chain.Hash{}
	}
	if a.m[rc.ChainID] == nil {
		a.m[rc.ChainID] = map[int64]chain.Hash{}
	}
	if h, dup := a.m[rc.ChainID][rc.Sequence]; dup && h != rc.HeadHash {
		panic(fmt.Sprintf("chain %s sequence %d acknowledged twice with different records: forked", rc.ChainID, rc.Sequence))
	}
	a.m[rc.ChainID][rc.Sequence] = rc.HeadHash
}

// checkAcked checks that every acknowledged record is in its chain, that
// each chain verifies, and that its export (what an auditor gets)
// verifies too; it returns the number of records.
func checkAcked(t *testing.T, s *pgstore.Evidence, a *acked) int {
	t.Helper()
	ctx := context.Background()
	total := 0
	for id, seqs := range a.m {
		recs, err := s.Read(ctx, id, -1)
		if err != nil {
			t.Fatal(err)
		}
		for seq, h := range seqs {
			if seq >= int64(len(recs)) || recs[seq].Hash() != h {
				t.Errorf("chain %s: acknowledged record %d is lost", id, seq)
			}
		}
		if len(recs) == 0 {
			continue
		}
		head := recs[len(recs)-1].Hash()
		res, err := s.Verify(ctx, id, head)
		if err != nil || !res.OK() {
			t.Fatalf("chain %s does not verify: %+v %v", id, res, err)
		}
		res, err = chain.Verify(bytes.NewReader(exportOf(t, s, id)), chain.VerifyOptions{ChainID: id, ExpectedHead: &head})
		if err != nil || !res.OK() || res.Records != int64(len(recs)) {
			t.Fatalf("chain %s: export does not verify: %+v %v", id, res, err)
		}
		total += len(recs)
	}
	return total
}

const childEnv = "POLC_PGSTORE_CHILD"

// TestKillWriterMidGroup kills a writer process (this test binary, run
// again as a child) while a group's transaction is open: every record
// the child was told is durable is in its chain, the group in flight is
// not, the chains verify, and a new writer goes on from their heads.
func TestKillWriterMidGroup(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		writerChild(t)
		return
	}
	dsn := pgtest.Schema(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillWriterMidGroup$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+dsn)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &acked{}
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4 && f[0] == "ACK":
			seq, _ := strconv.ParseInt(f[2], 10, 64)
			h, _ := chain.ParseHash(f[3])
			a.add(chain.AppendReceipt{ChainID: f[1], Sequence: seq, HeadHash: h})
		case len(f) == 2 && f[0] == "COMMITTING" && !killed:
			// The child stalls here with the group's transaction open.
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	cmd.Wait()
	if !killed || len(a.m) == 0 {
		t.Fatalf("the child was not killed mid-group (killed %v, %d chains acknowledged)", killed, len(a.m))
	}
	s := openEvidenceAt(t, dsn, pgstore.EvidenceOptions{})
	before := checkAcked(t, s, a)
	n := 0
	for _, seqs := range a.m {
		n += len(seqs)
	}
	if before != n {
		t.Fatalf("%d records in the chains, %d acknowledged: the group in flight when the writer died was committed", before, n)
	}
	// A new writer goes on from each chain's head.
	ids := storetest.NewIDs("0000000c")
	for id := range a.m {
		for _, rc := range storetest.AppendN(t, s, ids, id, 2) {
			a.add(rc)
		}
	}
	if after := checkAcked(t, s, a); after != before+2*len(a.m) {
		t.Fatalf("%d records after going on, want %d", after, before+2*len(a.m))
	}
}

// writerChild appends to three chains from several goroutines, printing
// each acknowledgment; from its fifth group on, it says so and stalls
// before COMMIT, and waits to be killed.
func writerChild(t *testing.T) {
	s, err := pgstore.OpenEvidence(context.Background(), os.Getenv(childEnv), pgstore.EvidenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	groups := 0
	pgstore.SetBeforeCommit(s, func(n int) {
		mu.Lock()
		groups++
		g := groups
		mu.Unlock()
		if g >= 5 {
			fmt.Printf("COMMITTING %d\n", n)
			time.Sleep(time.Minute)
		}
	})
	ids := storetest.NewIDs("0000000b")
	var wg sync.WaitGroup
	for range 3 {
		w := &chain.Writer{Store: s, ChainID: ids.Next()}
		for range 3 {
			wg.Go(func() {
				for {
					op := ids.Next()
					_, rc, err := w.Append(context.Background(), storetest.Draft(ids, w.ChainID, &op, storetest.Bound()))
					if err != nil {
						fmt.Fprintln(os.Stderr, "child:", err)
						return
					}
					mu.Lock()
					fmt.Printf("ACK %s %d %s\n", rc.ChainID, rc.Sequence, rc.HeadHash)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
}

// TestRestartServerMidRun restarts the server (a cluster of the test's
// own) while writers append: groups that lose their connection are
// retried, nothing acknowledged is lost, no chain forks, and every chain
// and its export verify.
func TestRestartServerMidRun(t *testing.T) {
	server, dir := pgtest.Private(t)
	dsn := pgtest.SchemaOn(t, server)
	s := openEvidenceAt(t, dsn, pgstore.EvidenceOptions{RetryFor: time.Minute})
	ids := storetest.NewIDs("0000000d")
	a := &acked{}
	var stop atomic.Bool
	var failures atomic.Int64
	var wg sync.WaitGroup
	var appended atomic.Int64
	for range 3 {
		w := &chain.Writer{Store: s, ChainID: ids.Next()}
		for range 2 {
			wg.Go(func() {
				for !stop.Load() {
					op := ids.Next()
					_, rc, err := w.Append(context.Background(), storetest.Draft(ids, w.ChainID, &op, storetest.Bound()))
					if err != nil {
						failures.Add(1)
						t.Logf("append: %v", err)
						continue
					}
					a.add(rc)
					appended.Add(1)
				}
			})
		}
	}
	waitFor := func(n int64) {
		for deadline := time.Now().Add(time.Minute); appended.Load() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("only %d appends acknowledged", appended.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(50)
	pgtest.Restart(t, dir)
	at := appended.Load()
	waitFor(at + 50) // appends go on after the restart
	stop.Store(true)
	wg.Wait()
	if s.Stats().Retries == 0 {
		t.Error("no group was retried: the restart did not cut a connection in use")
	}
	if f := failures.Load(); f > 0 {
		t.Errorf("%d appends failed across the restart (retried groups should have succeeded)", f)
	}
	checkAcked(t, s, a)
}

// TestConcurrentTwoStoresOneChain: two stores (two connection pools, as
// two processes have) append to one chain through their own writers. The
// loser of each sequence gets a conflict, and its next append goes on
// from the chain's committed head; every acknowledged record is in the
// chain, which never forks.
func TestConcurrentTwoStoresOneChain(t *testing.T) {
	dsn := pgtest.Schema(t)
	stores := []*pgstore.Evidence{openEvidenceAt(t, dsn, pgstore.EvidenceOptions{}), openEvidenceAt(t, dsn, pgstore.EvidenceOptions{})}
	ids := storetest.NewIDs("0000000e")
	c := ids.Next()
	a := &acked{}
	var conflicts, wins atomic.Int64
	var wg sync.WaitGroup
	for _, s := range stores {
		w := &chain.Writer{Store: s, ChainID: c}
		for range 2 {
			wg.Go(func() {
				for range 25 {
					op := ids.Next()
					_, rc, err := w.Append(context.Background(), storetest.Draft(ids, c, &op, storetest.Bound()))
					var ce *chain.ConflictError
					switch {
					case err == nil:
						a.add(rc)
						wins.Add(1)
					case errors.As(err, &ce):
						conflicts.Add(1)
					default:
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if n := checkAcked(t, stores[0], a); int64(n) != wins.Load() {
		t.Fatalf("%d records in the chain, %d acknowledged", n, wins.Load())
	}
	t.Logf("%d appended, %d conflicts", wins.Load(), conflicts.Load())
}

// TestStatementTimeout: a group blocked beyond the session's
// statement_timeout (another transaction holds the chain's next sequence)
// fails: its records are not acknowledged and not in the chain. Once the
// other transaction is gone the writer goes on from the committed head.
func TestStatementTimeout(t *testing.T) {
	dsn := pgtest.Schema(t)
	s := openEvidenceAt(t, pgtest.WithParam(t, dsn, "statement_timeout", "300ms"), pgstore.EvidenceOptions{})
	ctx := context.Background()
	ids := storetest.NewIDs("0000000f")
	c := ids.Next()
	a := &acked{}
	for _, rc := range storetest.AppendN(t, s, ids, c, 3) {
		a.add(rc)
	}
	// Another session inserts sequence 3 and keeps its transaction open.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO polc_records (chain_id, sequence, record_id, chain_hash, record_type, line)
		VALUES ($1, 3, $2, $3, 'policy_bound', 'x')`, c, ids.Next(), make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
	w := &chain.Writer{Store: s, ChainID: c}
	op := ids.Next()
	start := time.Now()
	_, _, err = w.Append(ctx, storetest.Draft(ids, c, &op, storetest.Bound()))
	if err == nil || !strings.Contains(err.Error(), "statement timeout") {
		t.Fatalf("append blocked by another transaction: %v, want a statement timeout", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the timeout took %v", d)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, rc := range storetest.AppendN(t, s, ids, c, 2) {
		a.add(rc)
	}
	if n := checkAcked(t, s, a); n != 5 {
		t.Fatalf("%d records, want 5", n)
	}
}
