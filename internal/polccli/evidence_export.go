package polccli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/pgstore"
)

func newEvidenceExportCmd(e *env) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "export STORE [CHAIN_ID…] [-o DIR]",
		Short: "Write evidence chains as the JSONL files certverify reads",
		Long: `export reads chains from STORE, an evidence directory (the file store) or a
postgres:// DSN (the PostgreSQL store, docs/scale.md), and writes each as
JSONL: its committed records' lines, exactly as they were appended, one
per line. That is byte for byte the chain file a file store holding the
same records would hold, which certverify chain and cert verify.

With one CHAIN_ID and no -o, the chain is written to standard output.
With -o DIR, each named chain, or every chain in STORE when none is
named, is written to DIR/<chain_id>.jsonl (each file replaced whole, or
not at all). A chain being appended to is exported as far as its records
are committed (the file store: fsynced).

Exit codes: 0 written, 2 bad input (an unreadable store, a chain id that is
not a UUID or has no records, no chain and no -o).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return runEvidenceExport(c.Context(), e, args[0], args[1:], out)
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "", "write DIR/<chain_id>.jsonl per chain (default: the one chain to standard output)")
	return c
}

// exportSource is a store export reads chains from.
type exportSource interface {
	chains(ctx context.Context) ([]string, error)
	export(ctx context.Context, chainID string, w io.Writer) error
	close()
}

type fileSource struct {
	dir string
	s   *chain.FileStore
}

func (f fileSource) chains(context.Context) ([]string, error) {
	names, err := filepath.Glob(filepath.Join(f.dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, n := range names {
		if id := strings.TrimSuffix(filepath.Base(n), ".jsonl"); chain.IsUUID(id) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

func (f fileSource) export(_ context.Context, id string, w io.Writer) error { return f.s.Export(id, w) }
func (f fileSource) close()                                                 { f.s.Close() }

type pgSource struct{ s *pgstore.Evidence }

func (p pgSource) chains(ctx context.Context) ([]string, error) { return p.s.Chains(ctx) }
func (p pgSource) export(ctx context.Context, id string, w io.Writer) error {
	return p.s.Export(ctx, id, w)
}
func (p pgSource) close() { p.s.Close() }

func runEvidenceExport(ctx context.Context, e *env, store string, ids []string, out string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	name := store
	fail := func(file, format string, args ...any) error {
		return reportOne(e, diag.Pos{File: file}, diag.CodeIO, format, args...)
	}
	if out == "" && len(ids) != 1 {
		return usagef("evidence export: name one chain to write to standard output, or give -o DIR")
	}
	for _, id := range ids {
		if !chain.IsUUID(id) {
			return usagef("evidence export: %q is not a chain id (a lowercase UUID)", id)
		}
	}
	var src exportSource
	if pgstore.IsDSN(store) {
		name = pgstore.Redact(store)
		s, err := pgstore.OpenEvidence(ctx, store, pgstore.EvidenceOptions{})
		if err != nil {
			return fail(name, "evidence export: %v", err)
		}
		src = pgSource{s}
	} else {
		dir := e.abs(store)
		name = diag.Rel(e.dir, dir)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fail(name, "evidence export: not a directory")
		}
		s, err := chain.OpenFileStore(dir)
		if err != nil {
			return fail(name, "evidence export: %v", err)
		}
		src = fileSource{dir, s}
	}
	defer src.close()
	if len(ids) == 0 {
		var err error
		if ids, err = src.chains(ctx); err != nil {
			return fail(name, "evidence export: %v", err)
		}
	}
	if out == "" {
		var buf countingWriter
		buf.w = bufio.NewWriter(e.stdout)
		if err := src.export(ctx, ids[0], &buf); err != nil {
			return fail(name, "evidence export: chain %s: %v", ids[0], err)
		}
		if buf.n == 0 {
			return fail(name, "evidence export: chain %s has no records", ids[0])
		}
		return buf.w.Flush()
	}
	dir := e.abs(out)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(diag.Rel(e.dir, dir), "evidence export: %v", err)
	}
	for _, id := range ids {
		path := filepath.Join(dir, id+".jsonl")
		n, err := exportFile(ctx, src, id, path)
		if err != nil {
			return fail(diag.Rel(e.dir, path), "evidence export: chain %s: %v", id, err)
		}
		if n == 0 {
			return fail(name, "evidence export: chain %s has no records", id)
		}
		fmt.Fprintf(e.stdout, "%s: %d bytes\n", diag.Rel(e.dir, path), n)
	}
	return nil
}

type countingWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// exportFile writes one chain to path through a synced temporary file
// renamed into place, so that path holds a whole export or what it held.
func exportFile(ctx context.Context, src exportSource, id, path string) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	cw := &countingWriter{w: bufio.NewWriterSize(tmp, 1<<16)}
	err = src.export(ctx, id, cw)
	if err == nil {
		err = cw.w.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	err = errors.Join(err, tmp.Close())
	if err != nil || cw.n == 0 {
		return cw.n, err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return 0, err
	}
	return cw.n, os.Rename(tmp.Name(), path)
}
