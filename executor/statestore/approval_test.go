package statestore

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/executor"
)

// TestApprovalNonceSurvivesRestart: a nonce recorded before the store is
// closed is still spent when it is opened again (a restart does not reset
// replay protection), and a second process's store sees the first's.
func TestApprovalNonceSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()
	nonce := strings.Repeat("ab", 32)
	at := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
	s, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UseApprovalNonce(ctx, nonce, "a1", at); err != nil {
		t.Fatal(err)
	}
	other, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.UseApprovalNonce(ctx, nonce, "a1", at); !errors.Is(err, executor.ErrApprovalReplayed) {
		t.Fatalf("second process: %v, want replayed", err)
	}
	other.Close()
	s.Close()
	s, err = OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.UseApprovalNonce(ctx, nonce, "a1", at); !errors.Is(err, executor.ErrApprovalReplayed) {
		t.Fatalf("after restart: %v, want replayed", err)
	}
	if err := s.UseApprovalNonce(ctx, strings.Repeat("cd", 32), "a2", at); err != nil {
		t.Fatalf("a fresh nonce: %v", err)
	}
}
