package chain

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// TLogProofHeader is the first line of an inclusion proof file
// (C2SP tlog-proof).
const TLogProofHeader = "c2sp.org/tlog-proof@v1"

// ConsistencyProofHeader is the first line of a consistency proof file.
const ConsistencyProofHeader = "polc.dev/consistency-proof@v1"

// InclusionProofFile is a C2SP tlog-proof: the index of a record, its
// audit path and the signed checkpoint it leads to, verbatim. Extra is
// unauthenticated; polc writes none and verifiers ignore it.
type InclusionProofFile struct {
	Extra      []byte
	Index      uint64
	Path       []Hash
	Checkpoint []byte // the signed note, verbatim
}

// Format returns the file form:
//
//	c2sp.org/tlog-proof@v1
//	[extra <base64>]
//	index <decimal>
//	<base64 hash>            (zero or more, leaf's sibling first)
//	                         (empty line)
//	<checkpoint note verbatim>
func (p *InclusionProofFile) Format() []byte {
	var b bytes.Buffer
	b.WriteString(TLogProofHeader + "\n")
	if p.Extra != nil {
		b.WriteString("extra " + base64.StdEncoding.EncodeToString(p.Extra) + "\n")
	}
	b.WriteString("index " + strconv.FormatUint(p.Index, 10) + "\n")
	for _, h := range p.Path {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	b.WriteString("\n")
	b.Write(p.Checkpoint)
	return b.Bytes()
}

func parseHashLine(s string) (Hash, error) {
	var h Hash
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != 32 || base64.StdEncoding.EncodeToString(raw) != s {
		return h, fmt.Errorf("%q is not the base64 of a 32-byte hash", s)
	}
	copy(h[:], raw)
	return h, nil
}

func parseDecimal(s string) (uint64, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && s == strconv.FormatUint(n, 10)
}

// ParseInclusionProof parses a tlog-proof file strictly.
func ParseInclusionProof(data []byte) (*InclusionProofFile, error) {
	if len(data) > MaxNoteBytes {
		return nil, fmt.Errorf("proof exceeds %d bytes", MaxNoteBytes)
	}
	head, cp, ok := strings.Cut(string(data), "\n\n")
	if !ok {
		return nil, errors.New("no empty line before the checkpoint")
	}
	lines := strings.Split(head, "\n")
	if lines[0] != TLogProofHeader {
		return nil, fmt.Errorf("first line is %q, want %q", lines[0], TLogProofHeader)
	}
	p := &InclusionProofFile{Checkpoint: []byte(cp)}
	i := 1
	if i < len(lines) && strings.HasPrefix(lines[i], "extra ") {
		// Canonical only: the decoder also skips '\r' and ignores
		// non-zero padding bits, which Format would not write back.
		enc := lines[i][len("extra "):]
		extra, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || base64.StdEncoding.EncodeToString(extra) != enc {
			return nil, errors.New("extra is not canonical standard base64")
		}
		p.Extra = extra
		i++
	}
	if i >= len(lines) || !strings.HasPrefix(lines[i], "index ") {
		return nil, errors.New(`missing "index N" line`)
	}
	idx, ok := parseDecimal(lines[i][len("index "):])
	if !ok {
		return nil, fmt.Errorf("index %q is not a canonical decimal", lines[i][len("index "):])
	}
	p.Index = idx
	for _, ln := range lines[i+1:] {
		if len(p.Path) >= MaxProofHashes {
			return nil, fmt.Errorf("more than %d proof hashes", MaxProofHashes)
		}
		h, err := parseHashLine(ln)
		if err != nil {
			return nil, err
		}
		p.Path = append(p.Path, h)
	}
	return p, nil
}

// ConsistencyProofFile proves that the tree of size Old is a prefix of the
// tree of size New.
type ConsistencyProofFile struct {
	Old, New uint64
	Path     []Hash
}

// Format returns the file form:
//
//	polc.dev/consistency-proof@v1
//	old <decimal>
//	new <decimal>
//	<base64 hash>            (zero or more, RFC 6962 order)
func (p *ConsistencyProofFile) Format() []byte {
	var b bytes.Buffer
	b.WriteString(ConsistencyProofHeader + "\n")
	b.WriteString("old " + strconv.FormatUint(p.Old, 10) + "\n")
	b.WriteString("new " + strconv.FormatUint(p.New, 10) + "\n")
	for _, h := range p.Path {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	return b.Bytes()
}

// ParseConsistencyProof parses a consistency proof file strictly.
func ParseConsistencyProof(data []byte) (*ConsistencyProofFile, error) {
	if len(data) > MaxNoteBytes {
		return nil, fmt.Errorf("proof exceeds %d bytes", MaxNoteBytes)
	}
	s := string(data)
	if !strings.HasSuffix(s, "\n") {
		return nil, errors.New("missing final newline")
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if len(lines) < 3 || lines[0] != ConsistencyProofHeader {
		return nil, fmt.Errorf("want %q, old and new lines", ConsistencyProofHeader)
	}
	p := &ConsistencyProofFile{}
	var ok bool
	old, okOld := strings.CutPrefix(lines[1], "old ")
	nw, okNew := strings.CutPrefix(lines[2], "new ")
	if !okOld || !okNew {
		return nil, errors.New(`want "old N" and "new M" lines`)
	}
	if p.Old, ok = parseDecimal(old); !ok {
		return nil, fmt.Errorf("old size %q is not a canonical decimal", old)
	}
	if p.New, ok = parseDecimal(nw); !ok {
		return nil, fmt.Errorf("new size %q is not a canonical decimal", nw)
	}
	for _, ln := range lines[3:] {
		if len(p.Path) >= MaxProofHashes {
			return nil, fmt.Errorf("more than %d proof hashes", MaxProofHashes)
		}
		h, err := parseHashLine(ln)
		if err != nil {
			return nil, err
		}
		p.Path = append(p.Path, h)
	}
	return p, nil
}
