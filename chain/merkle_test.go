package chain_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"polc.dev/polc/chain"
)

func leafInputs(n int) []chain.Hash {
	out := make([]chain.Hash, n)
	for i := range out {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(i))
		out[i] = sha256.Sum256(b[:])
	}
	return out
}

// tlogStore is an x/mod/sumdb/tlog HashReader over stored hashes.
type tlogStore []tlog.Hash

func (s tlogStore) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		out[i] = s[x]
	}
	return out, nil
}

// TestMerkleAgainstTlog cross-checks roots and proofs with an independent
// RFC 6962 implementation (golang.org/x/mod/sumdb/tlog), for every size up
// to 70 and a few larger ones.
func TestMerkleAgainstTlog(t *testing.T) {
	leaves := leafInputs(300)
	var stored tlogStore
	for i, h := range leaves {
		hs, err := tlog.StoredHashes(int64(i), h[:], stored)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, hs...)
		if got, want := chain.LeafHash(h), tlog.RecordHash(h[:]); got != chain.Hash(want) {
			t.Fatalf("leaf hash %d differs", i)
		}
	}
	tree := chain.NewTree(leaves)
	sizes := []int64{1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 64, 65, 127, 128, 129, 255, 256, 257, 299, 300}
	for n := int64(1); n <= 70; n++ {
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		want, err := tlog.TreeHash(n, stored)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tree.Root(uint64(n))
		if err != nil || got != chain.Hash(want) {
			t.Fatalf("root of %d: %x, want %x", n, got, want)
		}
		for _, i := range []int64{0, n / 2, n - 1} {
			path, err := tree.InclusionProof(uint64(i), uint64(n))
			if err != nil {
				t.Fatal(err)
			}
			rp := make(tlog.RecordProof, len(path))
			for k := range path {
				rp[k] = tlog.Hash(path[k])
			}
			if err := tlog.CheckRecord(rp, n, want, i, tlog.RecordHash(leaves[i][:])); err != nil {
				t.Fatalf("tlog rejects our inclusion proof %d/%d: %v", i, n, err)
			}
			if err := chain.VerifyInclusion(leaves[i], uint64(i), uint64(n), path, got); err != nil {
				t.Fatalf("inclusion %d/%d: %v", i, n, err)
			}
			if i+1 < n {
				if err := chain.VerifyInclusion(leaves[i+1], uint64(i), uint64(n), path, got); err == nil {
					t.Fatalf("inclusion of the wrong leaf verified")
				}
			}
		}
		for _, m := range []int64{1, n / 2, n - 1, n} {
			if m < 1 || m > n {
				continue
			}
			p, err := tree.ConsistencyProof(uint64(m), uint64(n))
			if err != nil {
				t.Fatal(err)
			}
			old, _ := tree.Root(uint64(m))
			tp := make(tlog.TreeProof, len(p))
			for k := range p {
				tp[k] = tlog.Hash(p[k])
			}
			if err := tlog.CheckTree(tp, n, want, m, tlog.Hash(old)); err != nil {
				t.Fatalf("tlog rejects our consistency proof %d->%d: %v", m, n, err)
			}
			if err := chain.VerifyConsistency(uint64(m), uint64(n), old, got, p); err != nil {
				t.Fatalf("consistency %d->%d: %v", m, n, err)
			}
			if len(p) > 0 {
				bad := append([]chain.Hash(nil), p...)
				bad[0][0] ^= 1
				if chain.VerifyConsistency(uint64(m), uint64(n), old, got, bad) == nil {
					t.Fatalf("corrupted consistency proof %d->%d verified", m, n)
				}
			}
		}
	}
	// size 0 is consistent with everything, with the empty root only
	root, _ := tree.Root(10)
	if err := chain.VerifyConsistency(0, 10, chain.EmptyRoot(), root, nil); err != nil {
		t.Fatal(err)
	}
	if err := chain.VerifyConsistency(0, 10, root, root, nil); err == nil {
		t.Fatal("size 0 with a non-empty root accepted")
	}
}

// TestStreamingRootMatchesTree checks the verifier's compact-range root
// (and its roots at intermediate sizes) against the in-memory tree.
func TestStreamingRootMatchesTree(t *testing.T) {
	data, _ := smallChain()
	var hashes []chain.Hash
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		r, err := chain.ParseRecord(line)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, r.Hash())
	}
	tree := chain.NewTree(hashes)
	sizes := []uint64{0, 1, 2, 3, 5, uint64(len(hashes))}
	res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{RootSizes: sizes})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sizes {
		want, _ := tree.Root(s)
		if res.Roots[s] != want {
			t.Errorf("root at %d: %s, want %s", s, res.Roots[s], want)
		}
	}
	want, _ := tree.Root(tree.Size())
	if res.Root != want {
		t.Errorf("final root %s, want %s", res.Root, want)
	}
}

// TestProofFilesRoundTrip parses what Format writes and rejects
// non-canonical spellings.
func TestProofFilesRoundTrip(t *testing.T) {
	leaves := leafInputs(9)
	tree := chain.NewTree(leaves)
	path, _ := tree.InclusionProof(3, 9)
	ip := &chain.InclusionProofFile{Index: 3, Path: path, Checkpoint: []byte("note\n\n— x y\n"), Extra: []byte("hi")}
	got, err := chain.ParseInclusionProof(ip.Format())
	if err != nil || got.Index != 3 || len(got.Path) != len(path) || string(got.Extra) != "hi" || !bytes.Equal(got.Checkpoint, ip.Checkpoint) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{
		"c2sp.org/tlog-proof@v2\nindex 3\n\nx",
		"c2sp.org/tlog-proof@v1\nindex 03\n\nx",
		"c2sp.org/tlog-proof@v1\nindex 3\nAAAA\n\nx",
		"c2sp.org/tlog-proof@v1\nindex 3",
	} {
		if _, err := chain.ParseInclusionProof([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	cp, _ := tree.ConsistencyProof(4, 9)
	c := &chain.ConsistencyProofFile{Old: 4, New: 9, Path: cp}
	gc, err := chain.ParseConsistencyProof(c.Format())
	if err != nil || gc.Old != 4 || gc.New != 9 || len(gc.Path) != len(cp) {
		t.Fatalf("round trip: %+v %v", gc, err)
	}
	if _, err := chain.ParseConsistencyProof([]byte("polc.dev/consistency-proof@v1\nold 4\nnew 9")); err == nil {
		t.Error("accepted a proof without a final newline")
	}
}
