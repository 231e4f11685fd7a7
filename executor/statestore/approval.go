package statestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"polc.dev/polc/executor"
)

var _ executor.ApprovalLedger = (*SQLite)(nil)

// UseApprovalNonce implements executor.ApprovalLedger: it records nonce in
// one write transaction and returns executor.ErrApprovalReplayed when the
// database already holds it, whichever process recorded it.
func (s *SQLite) UseApprovalNonce(ctx context.Context, nonce, approvalID string, at time.Time) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "INSERT INTO approval_nonces(nonce, approval_id, used_at_us) VALUES (?, ?, ?) ON CONFLICT(nonce) DO NOTHING",
			nonce, approvalID, at.UnixMicro())
		if err != nil {
			return fmt.Errorf("statestore: recording approval nonce: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return executor.ErrApprovalReplayed
		}
		return nil
	})
}
