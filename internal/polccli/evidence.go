package polccli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/atomicfile"
	"polc.dev/polc/internal/diag"
)

func newEvidenceCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "evidence",
		Short: "Maintain an evidence directory (the file store)",
	}
	c.AddCommand(&cobra.Command{
		Use:   "repair DIR [CHAIN_ID…]",
		Short: "Remove what a crash leaves (torn tails, empty chains, temporary files), keeping the bytes",
		Long: `repair opens the file store in DIR and removes the torn tail (bytes after
the last complete line, or from the first line holding a NUL byte) of each
named chain, or of every chain in DIR when none is named. A torn tail is
what a crash in the middle of a write leaves; no receipt ever acknowledged
those bytes, and the store refuses appends until they are gone. The removed
bytes are kept in <chain_id>.jsonl.torn-<offset> next to the chain. Opening
the store also drops the zeros a crash leaves after the data (the store's
reserve). A chain file with no record left (empty: a process stopped right
after creating it; or only a torn first line) is no chain and is removed,
unless the store's projection index lists records of it. When no chain is
named, the temporary files of atomic writes (.NAME.tmp-*) that a process
stopped before renaming them left in DIR are handled too: an empty one is
removed, another is kept as NAME.interrupted-* (a file still being written
by a live process is left alone). Each change is printed. Nothing else is
changed: verify the result with certverify chain.

A chain that is damaged rather than torn (a record that does not verify, a
NUL byte that no lost write explains) is reported as chain_damaged and left
exactly as it is: the lines after the damage may have been acknowledged.

Exit codes: 0 done (including "nothing to repair"), 1 a chain is damaged,
2 unreadable directory, unknown chain or a chain held by another process.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return runEvidenceRepair(c.Context(), e, args[0], args[1:])
		},
	})
	c.AddCommand(newEvidenceCertifyCmd(e), newEvidenceExportCmd(e))
	c.AddCommand(newEvidenceCheckpointCmd(e), newEvidenceProveCmd(e))
	return c
}

func runEvidenceRepair(_ context.Context, e *env, dir string, chains []string) error {
	dir = e.abs(dir)
	fail := func(file, format string, args ...any) error {
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, file)}, diag.CodeIO, format, args...)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fail(dir, "evidence repair: not a directory")
	}
	wholeDir := len(chains) == 0
	if wholeDir {
		names, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		if err != nil {
			return fail(dir, "evidence repair: %v", err)
		}
		for _, n := range names {
			if id := strings.TrimSuffix(filepath.Base(n), ".jsonl"); chain.IsUUID(id) {
				chains = append(chains, id)
			}
		}
		sort.Strings(chains)
		if len(chains) == 0 {
			fmt.Fprintf(e.stdout, "%s: no chains\n", diag.Rel(e.dir, dir))
			return repairTemps(e, dir)
		}
	}
	for _, id := range chains {
		if !chain.IsUUID(id) {
			return fail(dir, "evidence repair: %q is not a chain id (a lowercase UUID)", id)
		}
		if _, err := os.Stat(filepath.Join(dir, id+".jsonl")); err != nil {
			return fail(filepath.Join(dir, id+".jsonl"), "evidence repair: no such chain")
		}
	}
	s, err := chain.OpenFileStore(dir)
	if err != nil {
		return fail(dir, "evidence repair: %v", err)
	}
	defer s.Close()
	var damaged diag.List
	for _, id := range chains {
		rep, err := s.Repair(id)
		var ce *chain.CorruptChainError
		if errors.As(err, &ce) {
			// Damage, not a torn tail: nothing is removed, and the other
			// chains are still repaired.
			damaged.Add(diag.Pos{File: diag.Rel(e.dir, filepath.Join(dir, id+".jsonl")), Line: ce.Line}, diag.CodeChainDamaged,
				"evidence repair: %v; nothing was removed (only an interrupted append's torn tail is; inspect the file, and keep it)", ce.Err)
			continue
		}
		if err != nil {
			return fail(filepath.Join(dir, id+".jsonl"), "evidence repair: %v", err)
		}
		switch {
		case rep.Removed && rep.Bytes == 0:
			fmt.Fprintf(e.stdout, "%s: no record (an empty file, left by a process stopped right after creating it): removed %s\n",
				id, diag.Rel(e.dir, filepath.Join(dir, id+".jsonl")))
		case rep.Removed:
			fmt.Fprintf(e.stdout, "%s: removed %d torn bytes at offset %d, kept in %s; no record was left: removed %s\n",
				id, rep.Bytes, rep.Offset, diag.Rel(e.dir, rep.SavedTo), diag.Rel(e.dir, filepath.Join(dir, id+".jsonl")))
		case rep.Bytes == 0:
			fmt.Fprintf(e.stdout, "%s: no torn tail\n", id)
		default:
			fmt.Fprintf(e.stdout, "%s: removed %d torn bytes at offset %d, kept in %s\n",
				id, rep.Bytes, rep.Offset, diag.Rel(e.dir, rep.SavedTo))
		}
	}
	if wholeDir {
		if err := repairTemps(e, dir); err != nil {
			return err
		}
	}
	if len(damaged) > 0 {
		return report(e, damaged, diag.FormatText)
	}
	return nil
}

// repairTemps handles the temporary files of atomic writes that a process
// stopped before renaming them left in dir (atomicfile.Abandoned: one a
// live writer holds is not listed): an empty one is removed; another,
// never acknowledged but possibly all its writer wrote, is kept under a
// visible name, NAME.interrupted-SUFFIX (or the first free one after it).
func repairTemps(e *env, dir string) error {
	temps, locks, err := atomicfile.Abandoned(dir)
	defer func() {
		for _, f := range locks {
			f.Close()
		}
	}()
	if err != nil {
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, dir)}, diag.CodeIO, "evidence repair: %v", err)
	}
	for i, t := range temps {
		fail := func(err error) error {
			return reportOne(e, diag.Pos{File: diag.Rel(e.dir, t.Path)}, diag.CodeIO, "evidence repair: %v", err)
		}
		st, err := locks[i].Stat()
		if err != nil {
			return fail(err)
		}
		if st.Size() == 0 {
			if err := os.Remove(t.Path); err != nil {
				return fail(err)
			}
			fmt.Fprintf(e.stdout, "%s: an empty temporary file of an interrupted write: removed\n", diag.Rel(e.dir, t.Path))
			continue
		}
		side := filepath.Join(dir, t.Target+".interrupted-"+t.Suffix)
		for n := 2; ; n++ {
			// os.Link fails on an existing name, where Rename would
			// replace it.
			err := os.Link(t.Path, side)
			if err == nil {
				break
			}
			if !errors.Is(err, fs.ErrExist) || n > 1000 {
				return fail(err)
			}
			side = filepath.Join(dir, t.Target+".interrupted-"+t.Suffix+"."+strconv.Itoa(n))
		}
		if err := os.Remove(t.Path); err != nil {
			return fail(err)
		}
		fmt.Fprintf(e.stdout, "%s: the temporary file of an interrupted write of %s (%d bytes, never renamed into place): kept in %s\n",
			diag.Rel(e.dir, t.Path), t.Target, st.Size(), diag.Rel(e.dir, side))
	}
	if len(temps) > 0 {
		if err := atomicfile.SyncDir(dir); err != nil {
			return reportOne(e, diag.Pos{File: diag.Rel(e.dir, dir)}, diag.CodeIO, "evidence repair: %v", err)
		}
	}
	return nil
}
