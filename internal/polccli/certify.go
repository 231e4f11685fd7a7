package polccli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
	"polc.dev/polc/internal/atomicfile"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/keys"
	"polc.dev/polc/pgstore"
	"polc.dev/polc/snapshot"
)

type certifyParams struct {
	dir, chainID   string
	snapshot, cert string
	signKey, now   string
	idSeed         int
}

func newEvidenceCertifyCmd(e *env) *cobra.Command {
	p := &certifyParams{}
	c := &cobra.Command{
		Use:   "certify STORE CHAIN_ID --snapshot SNAP --cert FILE [--sign-key KEY]",
		Short: "Mint the certificate of a closed chain whose session stopped before writing it",
		Long: `certify mints the task certificate of a chain in STORE (a file store
directory, or a PostgreSQL DSN: docs/scale.md) that ends with its
task_closed record, for a certifiable session that stopped (was
killed, or its mint failed) after closing its task boundary and before
writing the certificate. The boundary (its id and times) is read from the
task_closed record, the policy from the chain's policy_bound records; SNAP
must be that policy version's snapshot. Every mint rule of a close applies
(the chain verifies, every operation has one terminal, the snapshot's digest
is the chain's pin); the head is the task_closed record's chain hash as the
store holds it, so run it only on a store you keep. A chain that was never
closed is not certified: its operations may have had effects no terminal
records.

Exit codes: 0 written, 1 the mint was refused (the rule and why are said),
2 bad input (the store, the chain, the snapshot, the key).`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			p.dir, p.chainID = args[0], args[1]
			return runEvidenceCertify(c.Context(), e, p)
		},
	}
	c.Flags().StringVar(&p.snapshot, "snapshot", "", "the snapshot of the chain's policy version (required)")
	c.Flags().StringVar(&p.cert, "cert", "", "where to write the certificate (required)")
	c.Flags().StringVar(&p.signKey, "sign-key", "", "certifier key (polc keygen): write a signed DSSE envelope")
	c.Flags().StringVar(&p.now, "now", "", "fixed clock, RFC 3339 (reproducible runs)")
	c.Flags().IntVar(&p.idSeed, "id-seed", 0, "derive the certificate id from this seed (reproducible runs)")
	c.Flags().MarkHidden("now")
	c.Flags().MarkHidden("id-seed")
	return c
}

func runEvidenceCertify(ctx context.Context, e *env, p *certifyParams) error {
	if p.snapshot == "" || p.cert == "" {
		return usagef("certify needs --snapshot SNAP and --cert FILE")
	}
	inputErr := func(file, format string, args ...any) error {
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, file)}, diag.CodeInvalidInput, format, args...)
	}
	// path positions the chain's messages: its file, or the redacted DSN
	// of a PostgreSQL store (docs/scale.md).
	var dir, path string
	if pgstore.IsDSN(p.dir) {
		path = pgstore.Redact(p.dir)
	} else {
		dir = e.abs(p.dir)
		path = filepath.Join(dir, p.chainID+".jsonl")
	}
	if !chain.IsUUID(p.chainID) {
		return inputErr(path, "certify: %q is not a chain id (a lowercase UUID)", p.chainID)
	}
	if dir != "" {
		if _, err := os.Stat(path); err != nil {
			return inputErr(path, "certify: no such chain")
		}
	}
	raw, err := os.ReadFile(e.abs(p.snapshot))
	if err != nil {
		return inputErr(e.abs(p.snapshot), "certify: cannot read the snapshot: %v", err)
	}
	snap, err := snapshot.Parse(raw)
	if err != nil {
		return inputErr(e.abs(p.snapshot), "certify: %v", err)
	}
	var signer note.Signer
	if p.signKey != "" {
		if signer, err = keys.ReadSigner(e.abs(p.signKey)); err != nil {
			return inputErr(e.abs(p.signKey), "certify: --sign-key: %v", err)
		}
	}
	now, err := clockFlag(p.now)
	if err != nil {
		return err
	}
	newID := idsFlag(p.idSeed)
	var store chain.Store
	if dir == "" {
		pg, err := pgstore.OpenEvidence(ctx, p.dir, pgstore.EvidenceOptions{})
		if err != nil {
			return inputErr(path, "certify: %v", err)
		}
		defer pg.Close()
		if _, ok, err := pg.Head(ctx, p.chainID); err != nil {
			return inputErr(path, "certify: %v", err)
		} else if !ok {
			return inputErr(path, "certify: no such chain %s", p.chainID)
		}
		store = pg
	} else {
		fs, err := chain.OpenFileStore(dir)
		if err != nil {
			return inputErr(dir, "certify: %v", err)
		}
		defer fs.Close()
		store = fs
	}
	recs, err := store.Read(ctx, p.chainID, -1)
	if err != nil {
		return inputErr(path, "certify: %v", err)
	}
	refused := func(msg string) error {
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, path)}, diag.CodeCertificateRefused, "certify: %s", msg)
	}
	if len(recs) == 0 || recs[len(recs)-1].RecordType != chain.TaskClosed {
		return refused("the chain does not end with task_closed: a task that was never closed is not certified (its operations may have had effects no terminal records)")
	}
	last := recs[len(recs)-1]
	pl, err := last.Payload()
	if err != nil {
		return inputErr(path, "certify: task_closed: %v", err)
	}
	tc := pl.(chain.TaskClosedPayload)
	opened, err1 := chain.ParseTime(tc.OpenedAt)
	closed, err2 := chain.ParseTime(tc.ClosedAt)
	if err := errors.Join(err1, err2); err != nil {
		return inputErr(path, "certify: task_closed: %v", err)
	}
	iss := certificate.Issuer{Store: store, Snapshots: certificate.MapSnapshots{snap.PolicyID + " " + snap.Version: raw}, Now: now, NewID: newID}
	c, err := iss.Mint(ctx, certificate.Boundary{TaskBoundaryID: tc.TaskBoundaryID, ChainID: p.chainID,
		PolicyID: last.PolicyID, PolicyVersion: last.PolicyVersion, OpenedAt: opened, ClosedAt: closed}, last.Hash())
	var re *certificate.RefusedError
	if errors.As(err, &re) {
		return refused(re.Error())
	}
	if err != nil {
		return err
	}
	out, err := certificateBytes(c, signer)
	if err != nil {
		return err
	}
	certPath := e.abs(p.cert)
	if err := atomicfile.WriteFile(certPath, out, 0o644); err != nil {
		return inputErr(certPath, "certify: write: %v", err)
	}
	fmt.Fprintf(e.stdout, "certificate: %s (%s, %d records, head %s)\n", diag.Rel(e.dir, certPath), c.ProcessGrade, c.TreeSize, c.EvidenceChainHead)
	return nil
}
