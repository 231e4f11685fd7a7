package polccli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/atomicfile"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/keys"
)

type checkpointParams struct {
	chain, signKey, out string
	size                int64
}

type proveParams struct {
	chain, checkpoint, out, recordOut string
	record, from                      int64
}

func newEvidenceCheckpointCmd(e *env) *cobra.Command {
	p := &checkpointParams{}
	c := &cobra.Command{
		Use:   "checkpoint CHAIN --sign-key KEY [--size N] [-o FILE]",
		Short: "Sign a checkpoint of an evidence chain (its size and Merkle root)",
		Long: `checkpoint verifies the chain file CHAIN (DIR/<chain_id>.jsonl) and prints a
signed checkpoint of it: a signed note whose body is the chain's origin
(polc.dev/chain/<chain_id>), its size (the number of records covered) and
the RFC 6962 Merkle root over their chain hashes, signed with KEY (a polc
keygen signer key; trust its .vkey with the role log). --size N covers
only the first N records (an earlier state of the chain). certverify
chain --checkpoint, inclusion and consistency read it; polc evidence
prove makes the proofs that go with it.

Exit codes: 0 written, 1 the chain does not verify (chain_damaged), 2 bad
input (the chain, the key, the size).`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.chain = args[0]
			return runEvidenceCheckpoint(e, p)
		},
	}
	c.Flags().StringVar(&p.signKey, "sign-key", "", "log signer key (polc keygen) (required)")
	c.Flags().Int64Var(&p.size, "size", -1, "cover only the first N records (-1: all of them)")
	c.Flags().StringVarP(&p.out, "out", "o", "", "write the checkpoint to FILE (default: standard output)")
	return c
}

func newEvidenceProveCmd(e *env) *cobra.Command {
	p := &proveParams{}
	c := &cobra.Command{
		Use:   "prove CHAIN --checkpoint FILE (--record N | --from SIZE) [-o FILE]",
		Short: "Make an inclusion or consistency proof for a signed checkpoint of a chain",
		Long: `prove verifies the chain file CHAIN and, for the signed checkpoint FILE
(polc evidence checkpoint) of that chain, prints:

  --record N   the inclusion proof of the record of sequence N: a
               c2sp.org/tlog-proof@v1 file (index, audit path, the
               checkpoint), for certverify inclusion RECORD PROOF;
               --record-out FILE writes the record's line (RECORD).
  --from SIZE  the consistency proof from the chain's first SIZE records
               to the checkpoint's size: a polc.dev/consistency-proof@v1
               file, for certverify consistency OLD NEW --proof FILE
               (OLD: polc evidence checkpoint --size SIZE).

The checkpoint's root must be the chain's root at its size: a checkpoint
of another chain, or of a chain since rewritten, is refused. Its
signature is not checked here; certverify checks it against a trust file.

Exit codes: 0 written, 1 the chain does not verify or does not match the
checkpoint, 2 bad input.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.chain = args[0]
			return runEvidenceProve(e, p)
		},
	}
	c.Flags().StringVar(&p.checkpoint, "checkpoint", "", "signed checkpoint of the chain (required)")
	c.Flags().Int64Var(&p.record, "record", -1, "sequence of the record to prove included")
	c.Flags().Int64Var(&p.from, "from", -1, "size of the earlier state to prove consistent")
	c.Flags().StringVar(&p.recordOut, "record-out", "", "with --record: write the record's line to FILE")
	c.Flags().StringVarP(&p.out, "out", "o", "", "write the proof to FILE (default: standard output)")
	return c
}

// chainLines verifies the chain file at path and returns its record lines
// and their Merkle tree. A chain that does not verify on its own (an error
// finding, a torn tail) is chain_damaged: no checkpoint or proof vouches
// for it.
func chainLines(e *env, path string) ([][]byte, *chain.Tree, string, error) {
	rel := diag.Rel(e.dir, path)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, "", reportOne(e, diag.Pos{File: rel}, diag.CodeIO, "cannot read: %v", unwrapPath(err))
	}
	res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{})
	if err != nil {
		return nil, nil, "", reportOne(e, diag.Pos{File: rel}, diag.CodeIO, "cannot read: %v", err)
	}
	if !res.OK() || res.TornTail || res.Records == 0 {
		msg := "the chain has no record"
		for _, f := range res.Findings {
			if f.Severity == chain.SeverityError || f.Severity == chain.SeverityUnsupported {
				msg = fmt.Sprintf("%s: %s", f.Code, f.Message)
				break
			}
		}
		if res.TornTail && res.OK() {
			msg = "a torn tail (polc evidence repair removes it)"
		}
		return nil, nil, "", reportOne(e, diag.Pos{File: rel}, diag.CodeChainDamaged, "the chain does not verify (%s); certverify chain %s says why", msg, rel)
	}
	var lines [][]byte
	var hashes []chain.Hash
	r := bufio.NewReader(bytes.NewReader(data))
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			rec, perr := chain.ParseRecord(bytes.TrimSuffix(line, []byte("\n")))
			if perr != nil {
				return nil, nil, "", reportOne(e, diag.Pos{File: rel, Line: len(lines) + 1}, diag.CodeChainDamaged, "%v", perr)
			}
			h, herr := chain.ParseHash(rec.ChainHash)
			if herr != nil {
				return nil, nil, "", reportOne(e, diag.Pos{File: rel, Line: len(lines) + 1}, diag.CodeChainDamaged, "%v", herr)
			}
			lines, hashes = append(lines, line), append(hashes, h)
		}
		if err == io.EOF {
			break
		}
	}
	return lines, chain.NewTree(hashes), res.ChainID, nil
}

// unwrapPath drops the path of a *fs.PathError (the diagnostic names it).
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// writeOut writes b to the file out, or to standard output when out is "".
func writeOut(e *env, out string, b []byte) error {
	if out == "" {
		_, err := e.stdout.Write(b)
		return err
	}
	path := e.abs(out)
	if err := atomicfile.WriteFile(path, b, 0o644); err != nil {
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, path)}, diag.CodeIO, "cannot write: %v", unwrapPath(err))
	}
	return nil
}

func runEvidenceCheckpoint(e *env, p *checkpointParams) error {
	if p.signKey == "" {
		return usagef("evidence checkpoint: --sign-key is required")
	}
	signer, err := keys.ReadSigner(e.abs(p.signKey))
	if err != nil {
		return usagef("--sign-key: %v", err)
	}
	_, tree, id, err := chainLines(e, e.abs(p.chain))
	if err != nil {
		return err
	}
	size := tree.Size()
	if p.size >= 0 {
		if uint64(p.size) > size || p.size == 0 {
			return usagef("--size %d: the chain has %d records (want 1 to %d)", p.size, size, size)
		}
		size = uint64(p.size)
	}
	root, err := tree.Root(size)
	if err != nil {
		return err
	}
	note, err := chain.SignCheckpoint(chain.Checkpoint{ChainID: id, Size: size, Root: root}, signer)
	if err != nil {
		return err
	}
	return writeOut(e, p.out, note)
}

func runEvidenceProve(e *env, p *proveParams) error {
	switch {
	case p.checkpoint == "":
		return usagef("evidence prove: --checkpoint is required")
	case (p.record >= 0) == (p.from >= 0):
		return usagef("evidence prove: give one of --record N (inclusion) and --from SIZE (consistency)")
	case p.recordOut != "" && p.record < 0:
		return usagef("evidence prove: --record-out goes with --record")
	}
	cpPath := e.abs(p.checkpoint)
	cpRel := diag.Rel(e.dir, cpPath)
	note, err := os.ReadFile(cpPath)
	if err != nil {
		return reportOne(e, diag.Pos{File: cpRel}, diag.CodeIO, "cannot read: %v", unwrapPath(err))
	}
	body, _, ok := strings.Cut(string(note), "\n\n")
	cp, cerr := chain.ParseCheckpoint(body + "\n")
	if !ok || cerr != nil || len(note) > chain.MaxNoteBytes {
		if cerr == nil {
			cerr = errors.New("not a signed note (no empty line before the signatures, or too large)")
		}
		return reportOne(e, diag.Pos{File: cpRel}, diag.CodeInvalidInput, "not a checkpoint: %v", cerr)
	}
	lines, tree, id, err := chainLines(e, e.abs(p.chain))
	if err != nil {
		return err
	}
	chainRel := diag.Rel(e.dir, e.abs(p.chain))
	mismatch := func(format string, args ...any) error {
		return reportOne(e, diag.Pos{File: cpRel}, diag.CodeChainDamaged, "the checkpoint is not of %s: "+format, append([]any{chainRel}, args...)...)
	}
	if cp.ChainID != id {
		return mismatch("it names chain %s, the chain is %s", cp.ChainID, id)
	}
	if cp.Size > tree.Size() {
		return mismatch("it covers %d records, the chain has %d", cp.Size, tree.Size())
	}
	if root, err := tree.Root(cp.Size); err != nil || root != cp.Root {
		return mismatch("its root is not the chain's root at size %d (the chain was rewritten, or the checkpoint is another's)", cp.Size)
	}
	if p.record >= 0 {
		if uint64(p.record) >= cp.Size {
			return usagef("--record %d: the checkpoint covers records 0 to %d", p.record, cp.Size-1)
		}
		path, err := tree.InclusionProof(uint64(p.record), cp.Size)
		if err != nil {
			return err
		}
		proof := (&chain.InclusionProofFile{Index: uint64(p.record), Path: path, Checkpoint: note}).Format()
		if p.recordOut != "" {
			if err := writeOut(e, p.recordOut, lines[p.record]); err != nil {
				return err
			}
		}
		return writeOut(e, p.out, proof)
	}
	if uint64(p.from) > cp.Size {
		return usagef("--from %d: the checkpoint covers %d records", p.from, cp.Size)
	}
	path, err := tree.ConsistencyProof(uint64(p.from), cp.Size)
	if err != nil {
		return err
	}
	return writeOut(e, p.out, (&chain.ConsistencyProofFile{Old: uint64(p.from), New: cp.Size, Path: path}).Format())
}
