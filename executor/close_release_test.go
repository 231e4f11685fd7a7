package executor_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
)

// TestCloseBoundaryReleasesTheChain: with the file store, a closed
// boundary's chain file held the store's zero reserve until the whole
// store closed, so a copy handed to an auditor failed as a torn tail.
// Closing now releases the chain: the file ends with task_closed and
// verifies as it is. ClosedAt reports the close; a refused mint (a task
// with no operation) still returns the close's result beside its
// *certificate.RefusedError, and ctx's cancellation does not refuse it.
func TestCloseBoundaryReleasesTheChain(t *testing.T) {
	dir := t.TempDir()
	store, err := chain.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r := newRig(t, store, nil)
	b, ec := r.openCertifiable(t)
	if _, closed := b.ClosedAt(); closed {
		t.Fatal("an open boundary reports a close")
	}
	if out := r.exec.Execute(context.Background(), req("1", "nothing", map[string]any{}), ec); out.Kind() != "succeeded" {
		t.Fatalf("execute: %s %s", out.Kind(), out.Base().ReasonCode)
	}
	res, err := r.exec.CloseBoundary(context.Background(), b)
	if err != nil || res.Certificate == nil {
		t.Fatalf("close: %v %+v", err, res)
	}
	if at, closed := b.ClosedAt(); !closed || at.IsZero() {
		t.Errorf("ClosedAt = %v, %v", at, closed)
	}
	data, err := os.ReadFile(filepath.Join(dir, b.ChainID()+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	vr, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{ExpectedHead: &res.Head, RequireClosed: true})
	if err != nil || !vr.OK() || vr.TornTail || vr.Records != res.Records {
		t.Fatalf("the chain file as it is on disk: %v %+v", err, vr.Findings)
	}

	empty, _ := r.openCertifiable(t)
	res, err = r.exec.CloseBoundary(context.Background(), empty)
	var re *certificate.RefusedError
	if !errors.As(err, &re) || res == nil || res.Records != 1 || res.Certificate != nil {
		t.Fatalf("closing a task with no operation: %+v %v, want its result and a refused mint", res, err)
	}
	if _, closed := empty.ClosedAt(); !closed {
		t.Error("the boundary whose mint was refused is not closed")
	}
}

// TestCloseBoundaryMintIgnoresCancel: a caller whose context is cancelled
// once task_closed is durable (a timeout) used to have the mint refused
// by a store that honours ctx: the boundary was closed for good and its
// certificate lost.
func TestCloseBoundaryMintIgnoresCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	store := &cancelOnClose{Store: chain.NewMemStore(), cancel: cancel}
	r := newRig(t, store, nil)
	b, ec := r.openCertifiable(t)
	if out := r.exec.Execute(context.Background(), req("1", "nothing", map[string]any{}), ec); out.Kind() != "succeeded" {
		t.Fatalf("execute: %s %s", out.Kind(), out.Base().ReasonCode)
	}
	res, err := r.exec.CloseBoundary(ctx, b)
	if ctx.Err() == nil {
		t.Fatal("the fault was not injected: task_closed did not cancel the context")
	}
	if err != nil || res == nil || res.Certificate == nil {
		t.Fatalf("close with the context cancelled after task_closed: %+v %v", res, err)
	}
}

// cancelOnClose is a store (fault injection) that cancels the caller's
// context once it has appended task_closed, and whose Verify honours
// cancellation as a remote store would.
type cancelOnClose struct {
	chain.Store
	cancel context.CancelFunc
}

func (s *cancelOnClose) Append(ctx context.Context, r *chain.Record) (chain.AppendReceipt, error) {
	rc, err := s.Store.Append(ctx, r)
	if err == nil && r.RecordType == chain.TaskClosed {
		s.cancel()
	}
	return rc, err
}

func (s *cancelOnClose) Verify(ctx context.Context, chainID string, head chain.Hash) (*chain.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.Store.Verify(ctx, chainID, head)
}
