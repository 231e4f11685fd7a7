package chain

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// The Merkle tree of a chain is the RFC 6962 tree (SHA-256, leaf prefix 0x00,
// node prefix 0x01) whose leaf i is the 32 raw bytes of record i's
// chain_hash: leaf hash = SHA-256(0x00 || chain_hash). The root of the empty
// tree is SHA-256 of the empty string.

var emptyRoot = Hash(sha256.Sum256(nil))

// EmptyRoot returns the root of a tree with no leaves.
func EmptyRoot() Hash { return emptyRoot }

// LeafHash returns the RFC 6962 leaf hash of a record with the given
// chain_hash.
func LeafHash(chainHash Hash) Hash {
	var b [33]byte
	copy(b[1:], chainHash[:])
	return sha256.Sum256(b[:])
}

func nodeHash(l, r Hash) Hash {
	var b [65]byte
	b[0] = 1
	copy(b[1:], l[:])
	copy(b[33:], r[:])
	return sha256.Sum256(b[:])
}

// nodeHasher computes leaf and node hashes reusing one SHA-256 state.
type nodeHasher struct {
	h    hash.Hash
	buf  [65]byte
	slab []byte // hashes are carved from it: compact.Range keeps slices
}

func (n *nodeHasher) sum() []byte {
	if len(n.slab) < 32 {
		n.slab = make([]byte, 32*512)
	}
	out := n.h.Sum(n.slab[:0:32])
	n.slab = n.slab[32:]
	return out
}

func newNodeHasher() *nodeHasher { return &nodeHasher{h: sha256.New()} }

func (n *nodeHasher) leaf(chainHash Hash) []byte {
	n.buf[0] = 0
	copy(n.buf[1:33], chainHash[:])
	n.h.Reset()
	n.h.Write(n.buf[:33])
	return n.sum()
}

func (n *nodeHasher) children(l, r []byte) []byte {
	n.buf[0] = 1
	copy(n.buf[1:33], l)
	copy(n.buf[33:65], r)
	n.h.Reset()
	n.h.Write(n.buf[:65])
	return n.sum()
}

// Tree holds the leaf hashes of a chain and builds roots and proofs. It keeps
// 32 bytes per record; verification never needs one (it streams).
type Tree struct {
	leaves []Hash
}

// NewTree returns the tree over the given chain hashes, in sequence order.
func NewTree(chainHashes []Hash) *Tree {
	t := &Tree{leaves: make([]Hash, len(chainHashes))}
	for i, h := range chainHashes {
		t.leaves[i] = LeafHash(h)
	}
	return t
}

// Append adds the next record's chain hash.
func (t *Tree) Append(chainHash Hash) { t.leaves = append(t.leaves, LeafHash(chainHash)) }

// Size returns the number of leaves.
func (t *Tree) Size() uint64 { return uint64(len(t.leaves)) }

// subtree returns the Merkle tree hash of leaves [lo, hi).
func (t *Tree) subtree(lo, hi uint64) Hash {
	n := hi - lo
	if n == 0 {
		return emptyRoot
	}
	if n == 1 {
		return t.leaves[lo]
	}
	k := uint64(1)
	for k<<1 < n {
		k <<= 1
	}
	return nodeHash(t.subtree(lo, lo+k), t.subtree(lo+k, hi))
}

// Root returns the root of the first size leaves. Requires size <= Size().
func (t *Tree) Root(size uint64) (Hash, error) {
	if size > t.Size() {
		return Hash{}, fmt.Errorf("chain: tree size %d exceeds %d records", size, t.Size())
	}
	return t.subtree(0, size), nil
}

// InclusionProof returns the RFC 6962 audit path of leaf index in the tree
// of the given size. Requires index < size <= Size().
func (t *Tree) InclusionProof(index, size uint64) ([]Hash, error) {
	if index >= size || size > t.Size() {
		return nil, fmt.Errorf("chain: no inclusion proof for index %d in tree size %d (have %d records)", index, size, t.Size())
	}
	return t.path(index, 0, size), nil
}

// path is RFC 6962 §2.1.1 PATH(m, D[lo:hi]).
func (t *Tree) path(m, lo, hi uint64) []Hash {
	n := hi - lo
	if n <= 1 {
		return nil
	}
	k := uint64(1)
	for k<<1 < n {
		k <<= 1
	}
	if m < k {
		return append(t.path(m, lo, lo+k), t.subtree(lo+k, hi))
	}
	return append(t.path(m-k, lo+k, hi), t.subtree(lo, lo+k))
}

// ConsistencyProof returns the RFC 6962 consistency proof between tree sizes
// size1 and size2. Requires size1 <= size2 <= Size(). The proof is empty
// when size1 is 0 or equal to size2.
func (t *Tree) ConsistencyProof(size1, size2 uint64) ([]Hash, error) {
	if size1 > size2 || size2 > t.Size() {
		return nil, fmt.Errorf("chain: no consistency proof from %d to %d (have %d records)", size1, size2, t.Size())
	}
	if size1 == 0 || size1 == size2 {
		return nil, nil
	}
	return t.subproof(size1, 0, size2, true), nil
}

// subproof is RFC 6962 §2.1.2 SUBPROOF(m, D[lo:hi], b).
func (t *Tree) subproof(m, lo, hi uint64, b bool) []Hash {
	n := hi - lo
	if m == n {
		if b {
			return nil
		}
		return []Hash{t.subtree(lo, hi)}
	}
	k := uint64(1)
	for k<<1 < n {
		k <<= 1
	}
	if m <= k {
		return append(t.subproof(m, lo, lo+k, b), t.subtree(lo+k, hi))
	}
	return append(t.subproof(m-k, lo+k, hi, false), t.subtree(lo, lo+k))
}

func toSlices(hs []Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

// ProofError is a failed inclusion or consistency proof. Expected is the
// root the proof had to reach; Calculated what it reached (zero when the
// proof had the wrong shape, see Msg).
type ProofError struct {
	Expected   Hash
	Calculated Hash
	Msg        string
}

func (e *ProofError) Error() string {
	if e.Msg != "" {
		return "chain: " + e.Msg
	}
	return fmt.Sprintf("chain: proof reaches root %s, want %s", e.Calculated, e.Expected)
}

// MaxProofHashes bounds the hashes of a proof: a tree of 2^64 leaves needs
// at most 64 for inclusion and 2*64 for consistency.
const MaxProofHashes = 128

// VerifyInclusion checks that the record with chainHash is leaf index of the
// tree of the given size and root. It returns a *ProofError on failure.
func VerifyInclusion(chainHash Hash, index, size uint64, path []Hash, root Hash) error {
	if index >= size {
		return &ProofError{Expected: root, Msg: fmt.Sprintf("index %d is not below tree size %d", index, size)}
	}
	if len(path) > MaxProofHashes {
		return &ProofError{Expected: root, Msg: fmt.Sprintf("proof has %d hashes, more than %d", len(path), MaxProofHashes)}
	}
	leaf := LeafHash(chainHash)
	calc, err := proof.RootFromInclusionProof(rfc6962.DefaultHasher, index, size, leaf[:], toSlices(path))
	if err != nil {
		return &ProofError{Expected: root, Msg: err.Error()}
	}
	var c Hash
	copy(c[:], calc)
	if c != root {
		return &ProofError{Expected: root, Calculated: c}
	}
	return nil
}

// VerifyConsistency checks that the tree (size1, root1) is a prefix of the
// tree (size2, root2). Size 0 is consistent with every tree if root1 is the
// empty root and the proof is empty (and root2 is the empty root too when
// size2 is 0). It returns a *ProofError on failure.
func VerifyConsistency(size1, size2 uint64, root1, root2 Hash, path []Hash) error {
	if len(path) > MaxProofHashes {
		return &ProofError{Expected: root2, Msg: fmt.Sprintf("proof has %d hashes, more than %d", len(path), MaxProofHashes)}
	}
	if size1 > size2 {
		return &ProofError{Expected: root2, Msg: fmt.Sprintf("old size %d is larger than new size %d", size1, size2)}
	}
	if size1 == 0 {
		if root1 != emptyRoot {
			return &ProofError{Expected: emptyRoot, Calculated: root1, Msg: "a tree of size 0 must have the empty root"}
		}
		if size2 == 0 && root2 != emptyRoot {
			return &ProofError{Expected: emptyRoot, Calculated: root2, Msg: "a tree of size 0 must have the empty root"}
		}
		if len(path) != 0 {
			return &ProofError{Expected: root2, Msg: "consistency from size 0 takes an empty proof"}
		}
		return nil
	}
	err := proof.VerifyConsistency(rfc6962.DefaultHasher, size1, size2, toSlices(path), root1[:], root2[:])
	if err == nil {
		return nil
	}
	var rm proof.RootMismatchError
	if errors.As(err, &rm) {
		pe := &ProofError{}
		copy(pe.Expected[:], rm.ExpectedRoot)
		copy(pe.Calculated[:], rm.CalculatedRoot)
		return pe
	}
	return &ProofError{Expected: root2, Msg: err.Error()}
}
