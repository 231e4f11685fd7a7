package chain

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/transparency-dev/merkle/compact"
)

// DefaultMaxFindings bounds the findings a verification collects; the rest
// are counted in Result.Omitted.
const DefaultMaxFindings = 100

// VerifyOptions configures a verification. The zero value verifies a chain
// on its own (it cannot detect truncation or a rewrite: see Audit.Anchored).
type VerifyOptions struct {
	// ExpectedHead, when set, must equal the chain_hash of the last record.
	ExpectedHead *Hash
	// ChainID, when set, is the chain every record must belong to.
	ChainID string
	// RootSizes lists tree sizes at which to capture the Merkle root and
	// the created_at of the last covered record (for checkpoints).
	RootSizes []uint64
	// RequireClosed makes task_not_closed an error instead of a warning.
	RequireClosed bool
	// MaxFindings bounds the findings kept (DefaultMaxFindings if 0).
	MaxFindings int
}

// GateCounts counts gate_evaluated records by level and decision.
type GateCounts struct {
	HardAllow     int64 `json:"hard_allow"`
	HardDeny      int64 `json:"hard_deny"`
	SoftAllow     int64 `json:"soft_allow"`
	SoftDeny      int64 `json:"soft_deny"`
	AdvisoryAllow int64 `json:"advisory_allow"`
	AdvisoryDeny  int64 `json:"advisory_deny"`
}

// CloseInfo describes the chain's task_closed record.
type CloseInfo struct {
	Sequence       int64  `json:"sequence"`
	Line           int64  `json:"line"` // 1-based line of the record in the chain file
	ChainHash      Hash   `json:"chain_hash"`
	TaskBoundaryID string `json:"task_boundary_id"`
	OpenedAt       string `json:"opened_at"`
	ClosedAt       string `json:"closed_at"`
	OperationCount int64  `json:"operation_count"`
}

// Result is the outcome of a verification. Everything in it is derived from
// the records; nothing is taken from a caller.
type Result struct {
	Findings []Finding
	// Omitted counts findings beyond VerifyOptions.MaxFindings.
	Omitted int

	Records int64 // complete record lines
	Bytes   int64 // bytes read, torn tail included

	ChainID       string
	HasHead       bool
	Head          Hash // chain_hash of the last record
	HeadSequence  int64
	HeadCreatedAt string
	Root          Hash // RFC 6962 root over the records' chain_hash values

	Closed         bool
	Close          *CloseInfo
	PolicyID       string
	PolicyVersion  string
	PolicyDigest   string // from the policy_bound records ("" if none)
	TaskBoundaryID string // from policy_bound or task_closed ("" if none)

	Gates      GateCounts
	Exceptions int64
	Approvals  int64 // approval_granted records
	// ApprovalRecords are the chain's approval_granted records (the first
	// MaxApprovalRecords), which a verifier with a trust file checks
	// against its approver keys (certificate.Verify).
	ApprovalRecords []ApprovalRecord
	Operations      int64 // operation_started records
	MaxOpenOps      int   // peak number of simultaneously open operations
	TornTail        bool
	HeadMatched     bool // ExpectedHead was set and equals Head

	// Roots and Times hold, for each size in VerifyOptions.RootSizes that
	// the chain reached, the Merkle root and the created_at of record size-1.
	Roots map[uint64]Hash
	Times map[uint64]string
}

// OK reports whether no finding of severity error or unsupported exists.
func (r *Result) OK() bool {
	for _, f := range r.Findings {
		if f.Severity == SeverityError || f.Severity == SeverityUnsupported {
			return false
		}
	}
	return true
}

// First returns the first finding with code c, or nil.
func (r *Result) First(c Code) *Finding {
	for i := range r.Findings {
		if r.Findings[i].Code == c {
			return &r.Findings[i]
		}
	}
	return nil
}

type opPhase uint8

const (
	phaseBound opPhase = iota
	phaseStarted
)

type opState struct {
	phase     opPhase
	startSeq  int64
	startLine int64
	blocked   bool   // a hard deny, or a soft deny without an exception
	blockedBy string // gate_id of the first blocking deny (clipped, for the message)
	// excepted maps the SHA-256 of a gate_id (its canonical JSON string)
	// to the windows of the operation's earlier exception_granted records
	// for it: a soft deny is excused when one of them was in force at the
	// deny's created_at (issued_at <= created_at <= expires_at). At most
	// maxExceptionWindows are kept per gate, so a hostile chain's denies
	// cost a bounded scan each; keeping the gate ids themselves would let
	// a chain of long distinct gate ids hold memory in proportion to its
	// bytes.
	excepted map[Hash][]exceptionWindow
}

// ApprovalRecord is one approval_granted record of a verified chain.
type ApprovalRecord struct {
	Sequence  int64
	Line      int64
	CreatedAt string
	Payload   ApprovalGrantedPayload
}

// MaxApprovalRecords bounds the approval_granted records a Result keeps.
const MaxApprovalRecords = 4096

// exceptionWindow is an exception's issued_at and expires_at, in
// TimeFormat (which compares as strings).
type exceptionWindow [2][timeLen]byte

// maxExceptionWindows bounds the exceptions remembered per gate and
// operation. The executor records at most one (a grant is single-use and
// a gate is evaluated once per operation); further ones are not
// remembered, so they excuse nothing: a chain that needs them is
// reported, not trusted.
const maxExceptionWindows = 8

// timeLen is the length of a time in TimeFormat.
const timeLen = len(TimeFormat)

// Verifier checks a chain one line at a time, with memory proportional to
// the operations open at once plus 16 bytes per record id and per closed
// operation (exact duplicate detection needs them). Use Verify for a reader;
// stores use Add and Finish directly.
type Verifier struct {
	opts VerifyOptions
	sc   *scanner
	l    line

	lineNo  int64
	records int64
	bytes   int64

	// link state
	haveLast  bool
	lastSeq   int64
	lastHash  Hash
	lastAlt   Hash // recomputed hash of the last record when it differed
	hasAlt    bool
	broken    bool
	chainID   uuid
	haveChain bool
	wantChain *uuid
	// alg is the SHA-256 of the first record's hash_algorithm (its JSON
	// string), algText that algorithm for messages, clipped.
	alg     Hash
	algText string

	// anchors
	headFoundAt int64 // sequence where ExpectedHead was seen, -1 if not
	rng         *compact.Range
	nh          *nodeHasher
	roots       map[uint64]Hash
	times       map[uint64]string
	rootSizes   map[uint64]bool

	// state machine
	ops       map[uuid]*opState
	tainted   map[uuid]bool
	holes     bool // a record was kept out of the state machine
	closedOps map[uuid]int64
	recordIDs map[uuid]int64
	// nonces maps the SHA-256 of each approval_granted nonce to the
	// sequence of the record that used it: an approval is single-use.
	nonces     map[Hash]int64
	closed     bool
	afterClose int64
	res        Result
	havePolicy bool
	policyID   uuid
	policyVer  []byte
	reported   map[Code]bool // codes reported once per chain

	findings  []Finding
	omitted   int
	keptError bool // findings holds a finding of severity error

	headTime    [27]byte
	digestRaw   []byte // quoted policy_digest of the first policy_bound
	boundaryRaw []byte // quoted task_boundary_id first seen

	badRun int // consecutive unusable lines
	badIdx int // index in findings of the run's first finding (-1: omitted)

	// rep is the current run of one repeating finding (see addRepeat).
	rep repeat
}

// repeat is a run of consecutive records with one finding that compares
// each record with the chain's first: the same code, expected and actual
// value. It is one finding, at the run's first record, that counts the
// others: when the first record's chain_id (or hash_algorithm) was
// changed, every later record differs from it, and a chain of 64,000
// records would otherwise give 64,000 findings of the one change.
type repeat struct {
	code             Code
	expected, actual string
	idx              int   // index of the run's finding in findings (-1: omitted or none)
	first, last      int64 // the run's first and last line
}

// NewVerifier returns a Verifier. Precondition: opts.ChainID, if set, is a
// lowercase UUID.
func NewVerifier(opts VerifyOptions) *Verifier {
	if opts.MaxFindings <= 0 {
		opts.MaxFindings = DefaultMaxFindings
	}
	v := &Verifier{
		opts:        opts,
		sc:          newScanner(),
		headFoundAt: -1,
		nh:          newNodeHasher(),
		ops:         make(map[uuid]*opState),
		tainted:     make(map[uuid]bool),
		closedOps:   make(map[uuid]int64),
		recordIDs:   make(map[uuid]int64),
		roots:       make(map[uint64]Hash),
		times:       make(map[uint64]string),
		rootSizes:   make(map[uint64]bool),
		reported:    make(map[Code]bool),
		rep:         repeat{idx: -1},
	}
	v.rng = (&compact.RangeFactory{Hash: v.nh.children}).NewEmptyRange(0)
	if opts.ChainID != "" && isUUID([]byte(opts.ChainID)) {
		u := parseUUID([]byte(opts.ChainID))
		v.wantChain = &u
	}
	for _, s := range opts.RootSizes {
		v.rootSizes[s] = true
	}
	if v.rootSizes[0] {
		v.roots[0] = emptyRoot
	}
	return v
}

// add keeps f, or counts it in omitted once MaxFindings are kept, and
// returns its index in findings (-1 when omitted). The verdict is decided by
// the most severe finding kept, so an error is never lost behind a full list
// of less severe ones (a run of unsupported_algorithm records): it takes the
// place of the last finding kept, which is counted as omitted instead.
func (v *Verifier) add(f Finding) int {
	f = f.clipped()
	if len(v.findings) < v.opts.MaxFindings {
		v.keptError = v.keptError || f.Severity == SeverityError
		v.findings = append(v.findings, f)
		return len(v.findings) - 1
	}
	v.omitted++
	if f.Severity != SeverityError || v.keptError {
		return -1
	}
	last := len(v.findings) - 1
	if v.badIdx == last {
		v.badIdx = -1
	}
	if v.rep.idx == last {
		v.rep.idx = -1
	}
	v.findings[last] = f
	v.keptError = true
	return last
}

func (v *Verifier) once(c Code) bool {
	if v.reported[c] {
		return false
	}
	v.reported[c] = true
	return true
}

// Verify reads a whole chain (JSONL) from r and verifies it. The error is
// non-nil only when r fails; every problem with the content is a finding.
func Verify(r io.Reader, opts VerifyOptions) (*Result, error) {
	v := NewVerifier(opts)
	br := bufio.NewReaderSize(r, MaxRecordBytes+1)
	for {
		b, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			v.Add(b[:len(b)-1])
		case errors.Is(err, bufio.ErrBufferFull):
			// An over-long line: skip to its end without buffering it.
			n, zeros := int64(len(b)), allZero(b)
			for errors.Is(err, bufio.ErrBufferFull) {
				b, err = br.ReadSlice('\n')
				n, zeros = n+int64(len(b)), zeros && allZero(b)
			}
			if err != nil && err != io.EOF {
				return nil, err
			}
			if err == io.EOF {
				v.addTail(n, zeros)
				return v.Finish(), nil
			}
			v.addOversized(n)
		case err == io.EOF:
			if len(b) > 0 {
				v.addTail(int64(len(b)), allZero(b))
			}
			return v.Finish(), nil
		default:
			return nil, err
		}
	}
}

func (v *Verifier) addOversized(n int64) {
	v.lineNo++
	v.records++
	v.bytes += n
	v.malformed(fmt.Sprintf("record of %d bytes exceeds the %d-byte limit", n-1, MaxRecordBytes))
}

// addTorn records a final line without its newline.
func (v *Verifier) addTorn(n int64) {
	v.bytes += n
	v.res.TornTail = true
	v.add(NewFinding(CodeTornTail, fmt.Sprintf("last line (%d bytes) has no newline: an interrupted append; it is not counted as a record", n)).At(-1, v.lineNo+1))
}

// AddTorn records that the input ends with n bytes after the last newline.
func (v *Verifier) AddTorn(n int64) { v.addTorn(n) }

// addTail records a final line without its newline: torn_tail, whose
// message says what n zero bytes are. No record holds a NUL byte, and the
// file store keeps zeros ahead of the data while a chain is open for
// writing, so a file copied then ends in them though no append was
// interrupted.
func (v *Verifier) addTail(n int64, zeros bool) {
	if !zeros {
		v.addTorn(n)
		return
	}
	v.bytes += n
	v.res.TornTail = true
	v.add(NewFinding(CodeTornTail, fmt.Sprintf("the input ends in %d zero bytes, no record: the file store's reserve, in a chain file copied while a store was writing it (copy it once the task is closed, or use the store's Export), or left by a crash (polc evidence repair removes it)", n)).At(-1, v.lineNo+1))
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// addRepeat adds f, a finding at the current line, unless it continues
// the run of the same finding on the lines just before (see repeat).
func (v *Verifier) addRepeat(f Finding) {
	f = f.clipped()
	if r := &v.rep; r.code == f.Code && r.expected == f.Expected && r.actual == f.Actual && r.last == v.lineNo-1 {
		r.last = v.lineNo
		return
	}
	v.endRepeat()
	v.rep = repeat{code: f.Code, expected: f.Expected, actual: f.Actual, idx: v.add(f), first: v.lineNo, last: v.lineNo}
}

// endRepeat completes the current run's finding: it says how many
// records after the first the run covers.
func (v *Verifier) endRepeat() {
	r := &v.rep
	if r.idx >= 0 && r.last > r.first {
		msg := fmt.Sprintf(" (and the %d records after it, to line %d)", r.last-r.first, r.last)
		if r.first == 2 && r.last == v.lineNo && v.records > 2 {
			// Every record but the first agrees: the first is likelier
			// the one that was changed.
			msg += "; every record but the first has this value, so the first record's may be the one that changed"
		}
		v.findings[r.idx].Message = clip(v.findings[r.idx].Message+msg, maxFindingText)
	}
	*r = repeat{idx: -1}
}

// malformed reports an unusable line; a run of consecutive unusable lines
// is reported once, at its first line.
func (v *Verifier) malformed(msg string) {
	v.badRun++
	if v.badRun == 1 {
		v.badIdx = v.add(NewFinding(CodeMalformedRecord, msg).At(-1, v.lineNo))
	}
	v.unusable()
}

// endRun closes a run of unusable lines.
func (v *Verifier) endRun() {
	if v.badRun > 1 && v.badIdx >= 0 {
		v.findings[v.badIdx].Message += fmt.Sprintf(" (and the %d lines after it)", v.badRun-1)
	}
	v.badRun = 0
}

// unusable handles a line whose link fields could not be read.
func (v *Verifier) unusable() {
	v.broken = true
	v.holes = true
	v.leaf(Hash{})
}

func (v *Verifier) leaf(h Hash) {
	v.rng.Append(v.nh.leaf(h), nil)
	size := v.rng.End()
	if v.rootSizes[size] {
		root, _ := v.rng.GetRootHash(nil)
		var r Hash
		copy(r[:], root)
		v.roots[size] = r
	}
}

// Add verifies one complete record line, without its newline.
func (v *Verifier) Add(b []byte) {
	v.lineNo++
	v.records++
	v.bytes += int64(len(b)) + 1
	if len(b) > MaxRecordBytes {
		v.malformed(fmt.Sprintf("record of %d bytes exceeds the %d-byte limit", len(b), MaxRecordBytes))
		return
	}
	l := &v.l
	// Explain a bad line only if its finding can be kept: a line in a
	// run of unusable lines is not reported, and once the findings are
	// full (with an error among them) nothing more is.
	full := len(v.findings) >= v.opts.MaxFindings && v.keptError
	v.sc.quietRecord, v.sc.quietPayload = full || v.badRun > 0, full
	lerr := v.sc.scan(b, l)
	if lerr != nil && lerr.unusable {
		v.malformed(lerr.msg)
		return
	}
	v.endRun()
	seq := l.seq
	lineFinding := false
	if lerr != nil {
		v.add(NewFinding(lerr.code, lerr.msg).At(seq, v.lineNo).Values(lerr.expected, lerr.actual))
		// An unsupported hash_algorithm is not a break: the record's
		// hashes cannot be checked, but its chain, sequence, link and
		// record_id can, and an error there must still fail the chain
		// (exit 1 takes precedence over 2).
		lineFinding = lerr.code != CodeUnsupportedAlgorithm
	}

	// One chain, one algorithm: a record naming another than the first
	// record's was changed. (A record edited and given an unknown
	// algorithm, its stored hashes kept, would otherwise be only
	// unsupported: exit 2, could not run, instead of 1.)
	if alg := sha256.Sum256(l.algorithm); !v.haveChain {
		v.alg, v.algText = alg, clip(string(unescape(nil, l.algorithm)), maxQuoted)
	} else if alg != v.alg && !lineFinding {
		v.addRepeat(NewFinding(CodeAlgorithmChanged, "hash_algorithm differs from the chain's first record's: a chain has one").At(seq, v.lineNo).
			Values(v.algText, string(unescape(nil, l.algorithm))))
		lineFinding = true
	}

	// chain identity
	want := v.wantChain
	if want == nil && v.haveChain {
		want = &v.chainID
	}
	if want != nil && *want != l.chainID {
		if !lineFinding {
			v.addRepeat(NewFinding(CodeChainIDMismatch, "record belongs to another chain").At(seq, v.lineNo).Values(want.String(), l.chainID.String()))
			lineFinding = true
		}
	}
	if !v.haveChain {
		v.haveChain = true
		v.chainID = l.chainID
		if v.wantChain != nil {
			v.chainID = *v.wantChain
		}
	}

	// links
	linked := false
	if !v.haveLast {
		if v.lineNo == 1 {
			if seq != 0 || l.hasPrev {
				if !lineFinding {
					f := NewFinding(CodeGenesisInvalid, "the first record must have sequence 0 and previous_chain_hash null")
					if seq != 0 {
						f = f.Values("sequence 0", "sequence "+strconv.FormatInt(seq, 10))
					} else {
						f = f.Values("null", l.prev.String())
					}
					v.add(f.At(seq, v.lineNo))
					lineFinding = true
				}
				v.broken = true
			} else {
				linked = true
			}
		}
	} else {
		var f *Finding
		switch {
		case seq == v.lastSeq+1 && l.hasPrev && (l.prev == v.lastHash || v.hasAlt && l.prev == v.lastAlt):
			linked = true
		case seq == v.lastSeq+1:
			actual := "null"
			if l.hasPrev {
				actual = l.prev.String()
			}
			x := NewFinding(CodeBrokenLink, "previous_chain_hash is not the previous record's chain_hash").Values(v.lastHash.String(), actual)
			f = &x
		case seq > v.lastSeq+1:
			x := NewFinding(CodeSequenceGap, fmt.Sprintf("%d record(s) missing before this one", seq-v.lastSeq-1)).Values(strconv.FormatInt(v.lastSeq+1, 10), strconv.FormatInt(seq, 10))
			f = &x
		default:
			x := NewFinding(CodeSequenceDuplicate, "sequence repeats or goes back").Values(strconv.FormatInt(v.lastSeq+1, 10), strconv.FormatInt(seq, 10))
			f = &x
		}
		if linked {
			v.broken = false
		} else {
			if !v.broken && !lineFinding {
				v.add(f.At(seq, v.lineNo))
				lineFinding = true
			}
			v.broken = true
		}
	}
	v.haveLast, v.lastSeq, v.lastHash = true, seq, l.storedHash
	v.lastAlt, v.hasAlt = l.altHash, l.hasAlt

	// unique record ids
	if prevSeq, dup := v.recordIDs[l.recordID]; dup {
		if !lineFinding {
			v.add(NewFinding(CodeDuplicateRecordID, "record_id "+l.recordID.String()+" was already used").At(seq, v.lineNo).Values("a new record_id", "record_id of sequence "+strconv.FormatInt(prevSeq, 10)))
			lineFinding = true
		}
	} else {
		v.recordIDs[l.recordID] = seq
	}

	// anchors
	if v.opts.ExpectedHead != nil && l.storedHash == *v.opts.ExpectedHead {
		v.headFoundAt = seq
	}
	v.leaf(l.storedHash)
	if size := v.rng.End(); v.rootSizes[size] {
		v.times[size] = string(l.createdAt)
	}
	v.res.HasHead = true
	v.res.Head = l.storedHash
	v.res.HeadSequence = seq
	copy(v.headTime[:], l.createdAt)

	if v.closed {
		v.afterClose++
		if v.afterClose == 1 {
			v.add(NewFinding(CodeRecordAfterClose, "a record follows task_closed").At(seq, v.lineNo).Values("no record after sequence "+strconv.FormatInt(v.res.Close.Sequence, 10), string(l.typ)))
		}
		return
	}
	if lineFinding {
		// The record is not trusted: keep its operation out of the state
		// machine, so one bad record is not also reported as an orphan,
		// a missing terminal and so on.
		if l.hasOp {
			v.tainted[l.opID] = true
		}
		v.holes = true
		return
	}
	v.apply(l, seq)
}

// apply runs the operation state machine and the chain-wide consistency
// checks on a well-formed record.
func (v *Verifier) apply(l *line, seq int64) {
	at := func(f Finding) Finding { return f.At(seq, v.lineNo) }
	// Once a record is missing from the state machine (unreadable or
	// failing its own checks), findings that a missing record would explain
	// are consequences of the break already reported, not new breaks.
	sensitive := func(f Finding) {
		if !v.holes {
			v.add(at(f))
		}
	}
	// one policy per chain
	if !v.havePolicy {
		v.havePolicy = true
		v.policyID = l.policyID
		v.policyVer = append([]byte(nil), l.policyVersion...)
		v.res.PolicyID = l.policyID.String()
		v.res.PolicyVersion = string(unescape(nil, l.policyVersion))
	} else if (l.policyID != v.policyID || !bytes.Equal(l.policyVersion, v.policyVer)) && v.once(CodePolicyMismatch) {
		v.add(at(NewFinding(CodePolicyMismatch, "record names another policy than the chain's first record").Values(
			v.policyID.String()+" "+string(v.policyVer), l.policyID.String()+" "+string(l.policyVersion))))
	}
	p := l.payload
	sp := &l.spans
	str := func(i int) string { return string(unescape(nil, sp[i].of(p))) }
	raw := func(i int) string { return string(sp[i].of(p)) }
	boundary := func(i int) {
		raw := sp[i].of(p)
		switch {
		case v.boundaryRaw == nil:
			v.boundaryRaw = append([]byte(nil), raw...)
			v.res.TaskBoundaryID = str(i)
		case !bytes.Equal(raw, v.boundaryRaw) && v.once(CodeBoundaryMismatch):
			v.add(at(NewFinding(CodeBoundaryMismatch, "task_boundary_id differs from the chain's").Values(v.res.TaskBoundaryID, str(i))))
		}
	}
	op := l.opID
	if l.hasOp && v.tainted[op] {
		return
	}
	st := v.ops[op]
	_, wasClosed := v.closedOps[op]
	switch l.typ {
	case PolicyBound:
		switch raw := sp[2].of(p); {
		case v.digestRaw == nil:
			v.digestRaw = append([]byte(nil), raw...)
			v.res.PolicyDigest = str(2)
		case !bytes.Equal(raw, v.digestRaw) && v.once(CodePolicyMismatch):
			v.add(at(NewFinding(CodePolicyMismatch, "policy_bound pins another policy digest").Values(v.res.PolicyDigest, str(2))))
		}
		boundary(3)
		switch {
		case wasClosed:
			sensitive(NewFinding(CodeEventAfterTerminal, "policy_bound for an operation that already ended").Values("a new operation_id", op.String()))
		case st != nil:
			sensitive(NewFinding(CodeOperationOrder, "second policy_bound for an operation").Values("one policy_bound", "another"))
		default:
			v.ops[op] = &opState{phase: phaseBound, startSeq: -1}
			v.res.MaxOpenOps = max(v.res.MaxOpenOps, len(v.ops))
		}
	case OperationStarted:
		v.res.Operations++
		switch {
		case wasClosed:
			sensitive(NewFinding(CodeEventAfterTerminal, "operation_started for an operation that already ended").Values("a new operation_id", op.String()))
		case st == nil:
			sensitive(NewFinding(CodeMissingPolicyBound, "operation_started without a preceding policy_bound").Values("policy_bound for "+op.String(), "none"))
			v.ops[op] = &opState{phase: phaseStarted, startSeq: seq, startLine: v.lineNo}
			v.res.MaxOpenOps = max(v.res.MaxOpenOps, len(v.ops))
		case st.phase == phaseStarted:
			sensitive(NewFinding(CodeOperationOrder, "second operation_started for an operation").Values("one operation_started", "another at sequence "+strconv.FormatInt(seq, 10)))
		default:
			st.phase, st.startSeq, st.startLine = phaseStarted, seq, v.lineNo
		}
	case GateEvaluated, ExceptionGranted, ApprovalGranted:
		if l.typ == GateEvaluated {
			level, decision := raw(3), raw(1)
			deny := decision == `"deny"`
			c := &v.res.Gates
			switch level {
			case `"hard"`:
				c.HardAllow, c.HardDeny = inc(c.HardAllow, !deny), inc(c.HardDeny, deny)
			case `"soft"`:
				c.SoftAllow, c.SoftDeny = inc(c.SoftAllow, !deny), inc(c.SoftDeny, deny)
			default:
				c.AdvisoryAllow, c.AdvisoryDeny = inc(c.AdvisoryAllow, !deny), inc(c.AdvisoryDeny, deny)
			}
			if st != nil && st.phase == phaseStarted && deny && !st.blocked {
				blocked := level == `"hard"`
				if level == `"soft"` {
					// Times in TimeFormat compare as strings.
					blocked = true
					at := string(l.createdAt)
					for _, w := range st.excepted[sha256.Sum256(sp[2].of(p))] {
						if string(w[0][:]) <= at && at <= string(w[1][:]) {
							blocked = false
							break
						}
					}
				}
				if blocked {
					st.blocked, st.blockedBy = true, clip(str(2), maxQuoted)
				}
			}
		} else {
			issued := 4 // exception_granted: actor, expires_at, gate_id, grant_id, issued_at
			if l.typ == ApprovalGranted {
				issued = 3 // approver_class, expires_at, gate_id, issued_at
				v.approval(l, p, sp[4].of(p), seq, at)
			} else {
				v.res.Exceptions++
			}
			if st != nil && st.phase == phaseStarted {
				// The times' JSON strings without their quotes.
				var w exceptionWindow
				copy(w[0][:], sp[issued].of(p)[1:])
				copy(w[1][:], sp[1].of(p)[1:])
				if st.excepted == nil {
					st.excepted = make(map[Hash][]exceptionWindow)
				}
				gate := sha256.Sum256(sp[2].of(p))
				if ws := st.excepted[gate]; len(ws) < maxExceptionWindows {
					st.excepted[gate] = append(ws, w)
				}
			}
		}
		switch {
		case wasClosed:
			sensitive(NewFinding(CodeEventAfterTerminal, string(l.typ)+" after the operation's terminal").Values("no record after sequence "+strconv.FormatInt(v.closedOps[op], 10), string(l.typ)))
		case st == nil:
			sensitive(NewFinding(CodeOrphanEvent, string(l.typ)+" for an operation that was never started").Values("operation_started for "+op.String(), "none"))
		case st.phase != phaseStarted:
			sensitive(NewFinding(CodeOperationOrder, string(l.typ)+" before operation_started").Values("operation_started", string(l.typ)))
		}
	case TaskClosed:
		v.closed = true
		boundary(3)
		count, _, _ := scanInt(p, int(sp[2].start))
		v.res.Closed = true
		v.res.Close = &CloseInfo{
			Sequence: seq, Line: v.lineNo, ChainHash: l.storedHash, TaskBoundaryID: str(3),
			OpenedAt: str(1), ClosedAt: str(0), OperationCount: count,
		}
		if count != v.res.Operations {
			sensitive(NewFinding(CodeOperationCount, "operation_count is not the number of operation_started records").Values(strconv.FormatInt(v.res.Operations, 10), strconv.FormatInt(count, 10)))
		}
	case RecordSuperseded:
		if _, ok := v.recordIDs[l.supersedes]; !ok || l.supersedes == l.recordID {
			sensitive(NewFinding(CodeDanglingSupersede, "supersedes_record_id names no earlier record").Values("an earlier record_id", l.supersedes.String()))
		}
	default: // terminals
		switch {
		case wasClosed:
			sensitive(NewFinding(CodeDuplicateTerminal, "second terminal for one operation").Values("one terminal (sequence "+strconv.FormatInt(v.closedOps[op], 10)+")", string(l.typ)))
		case st == nil || st.phase != phaseStarted:
			sensitive(NewFinding(CodeOrphanTerminal, string(l.typ)+" for an operation that was never started").Values("operation_started for "+op.String(), "none"))
			if st != nil {
				delete(v.ops, op)
			}
			v.closedOps[op] = seq
		default:
			if st.blocked && l.typ != OperationDenied {
				sensitive(NewFinding(CodeGateNotEnforced, "gate "+st.blockedBy+" denied the operation but it did not end in operation_denied").Values(string(OperationDenied), string(l.typ)))
			}
			delete(v.ops, op)
			v.closedOps[op] = seq
		}
	}
}

// approval counts an approval_granted record, keeps it for a trust check
// and reports a nonce used before in the chain (approval_replayed).
func (v *Verifier) approval(l *line, p, nonce []byte, seq int64, at func(Finding) Finding) {
	v.res.Approvals++
	h := sha256.Sum256(nonce)
	if v.nonces == nil {
		v.nonces = make(map[Hash]int64)
	}
	if first, dup := v.nonces[h]; dup {
		v.add(at(NewFinding(CodeApprovalReplayed, "approval_granted uses a nonce an earlier approval_granted used").Values("a nonce used once", "the nonce of sequence "+strconv.FormatInt(first, 10))))
	} else {
		v.nonces[h] = seq
	}
	if len(v.res.ApprovalRecords) >= MaxApprovalRecords {
		return
	}
	if dp, err := DecodePayload(ApprovalGranted, string(p)); err == nil {
		v.res.ApprovalRecords = append(v.res.ApprovalRecords, ApprovalRecord{Sequence: seq, Line: v.lineNo, CreatedAt: string(l.createdAt), Payload: dp.(ApprovalGrantedPayload)})
	}
}

func inc(n int64, yes bool) int64 {
	if yes {
		return n + 1
	}
	return n
}

// Finish completes the verification and returns its result. The Verifier
// must not be used afterwards.
func (v *Verifier) Finish() *Result {
	v.endRun()
	v.endRepeat()
	r := &v.res
	r.Records = v.records
	r.Bytes = v.bytes
	if r.HasHead {
		r.HeadCreatedAt = string(v.headTime[:])
	}
	if v.haveChain {
		r.ChainID = v.chainID.String()
	}
	if v.records == 0 {
		v.add(NewFinding(CodeEmptyChain, "the chain has no records"))
	}
	if v.closed {
		// Report open operations in start order (unless a record is
		// missing from the state machine: see apply).
		type open struct {
			seq, line int64
			id        uuid
		}
		var list []open
		for id, st := range v.ops {
			if st.phase == phaseStarted && !v.tainted[id] && !v.holes {
				list = append(list, open{st.startSeq, st.startLine, id})
			}
		}
		slices.SortFunc(list, func(a, b open) int { return cmp.Compare(a.seq, b.seq) })
		for _, o := range list {
			v.add(NewFinding(CodeMissingTerminal, "operation "+o.id.String()+" has no terminal record").At(o.seq, o.line).Values("one terminal", "none"))
		}
	} else if v.records > 0 {
		f := NewFinding(CodeTaskNotClosed, "no task_closed record: the task boundary is still open")
		if v.opts.RequireClosed {
			f.Severity = SeverityError
		}
		v.add(f.Values(string(TaskClosed), "none"))
	}
	if e := v.opts.ExpectedHead; e != nil {
		switch {
		case r.HasHead && r.Head == *e:
			r.HeadMatched = true
		case v.headFoundAt >= 0:
			v.add(NewFinding(CodeHeadMismatch, fmt.Sprintf("the expected head is the record at sequence %d; the chain continues past it", v.headFoundAt)).Values(e.String(), r.Head.String()))
		default:
			actual := "none"
			if r.HasHead {
				actual = r.Head.String()
			}
			v.add(NewFinding(CodeHeadMismatch, "no record has the expected head hash (truncated or rewritten)").Values(e.String(), actual))
		}
	}
	root, _ := v.rng.GetRootHash(nil)
	if root == nil {
		r.Root = emptyRoot
	} else {
		copy(r.Root[:], root)
	}
	r.Roots, r.Times = v.roots, v.times
	r.Findings, r.Omitted = v.findings, v.omitted
	return r
}
