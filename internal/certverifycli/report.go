package certverifycli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
)

// ReportFormat identifies the JSON report's version.
const ReportFormat = "polc.certverify.report/v1"

// Verdicts.
const (
	VerdictVerified     = "verified"
	VerdictFailed       = "failed"
	VerdictError        = "error"
	VerdictInconclusive = "inconclusive"
)

// Report is what certverify prints: with --format json, one object on
// stdout; its members are a contract (docs/certverify.md).
type Report struct {
	Format          string                   `json:"format"`
	Command         string                   `json:"command"`
	Verdict         string                   `json:"verdict"`
	ExitCode        int                      `json:"exit_code"`
	Error           string                   `json:"error,omitempty"`
	Findings        []chain.Finding          `json:"findings"`
	FindingsOmitted int                      `json:"findings_omitted"`
	Chain           *ChainSummary            `json:"chain"`
	Anchors         []chain.Anchor           `json:"anchors"`
	Checkpoints     []chain.CheckpointReport `json:"checkpoints"`
	Certificate     *CertificateSummary      `json:"certificate,omitempty"`
	Record          *RecordSummary           `json:"record,omitempty"`
	Stats           Stats                    `json:"stats"`
	summaryCounts   map[chain.Severity]int   `json:"-"`
}

// ChainSummary is what was derived from the chain.
type ChainSummary struct {
	ChainID        string                  `json:"chain_id"`
	Records        int64                   `json:"records"`
	Head           string                  `json:"head"`
	HeadSequence   *int64                  `json:"head_sequence"`
	MerkleRoot     string                  `json:"merkle_root"`
	Closed         bool                    `json:"closed"`
	TaskBoundaryID string                  `json:"task_boundary_id"`
	PolicyID       string                  `json:"policy_id"`
	PolicyVersion  string                  `json:"policy_version"`
	PolicyDigest   string                  `json:"policy_digest"`
	Operations     int64                   `json:"operations"`
	GateSummary    certificate.GateSummary `json:"gate_summary"`
	ProcessGrade   string                  `json:"process_grade"`
	TornTail       bool                    `json:"torn_tail"`
}

// CertificateSummary describes the certificate checked by `cert`.
type CertificateSummary struct {
	Signed      bool                     `json:"signed"`
	Signers     []string                 `json:"signers"`
	Certificate *certificate.Certificate `json:"certificate"`
	// checked says a trust file was given, so Signers are the verified
	// signers; without one no signature was checked.
	checked bool
}

// RecordSummary describes the record checked by `inclusion`.
type RecordSummary struct {
	ChainID   string `json:"chain_id"`
	RecordID  string `json:"record_id"`
	Sequence  int64  `json:"sequence"`
	ChainHash string `json:"chain_hash"`
}

// Stats are measurements of the run; seconds is the only member that is not
// deterministic.
type Stats struct {
	Records int64   `json:"records"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

func newReport(cmd string) *Report {
	return &Report{Format: ReportFormat, Command: cmd, Findings: []chain.Finding{}, Anchors: []chain.Anchor{}, Checkpoints: []chain.CheckpointReport{}}
}

func errorReport(cmd string, err error) *Report {
	r := newReport(cmd)
	r.Verdict, r.ExitCode, r.Error = VerdictError, ExitError, err.Error()
	return r
}

func summarize(res *chain.Result) *ChainSummary {
	s := &ChainSummary{
		ChainID: res.ChainID, Records: res.Records, MerkleRoot: base64.StdEncoding.EncodeToString(res.Root[:]),
		Closed: res.Closed, TaskBoundaryID: res.TaskBoundaryID, PolicyID: res.PolicyID,
		PolicyVersion: res.PolicyVersion, PolicyDigest: res.PolicyDigest, Operations: res.Operations,
		TornTail: res.TornTail,
	}
	if res.HasHead {
		s.Head = res.Head.String()
		seq := res.HeadSequence
		s.HeadSequence = &seq
	}
	s.GateSummary, s.ProcessGrade = certificate.Derive(res)
	return s
}

// addFindings appends findings and the omitted count.
func (r *Report) addFindings(fs []chain.Finding) { r.Findings = append(r.Findings, fs...) }

// finish computes the verdict and exit code from the findings:
// any error → failed (1); else any unsupported → error (2); else any
// inconclusive → inconclusive (3); else verified (0).
func (r *Report) finish(d time.Duration) {
	r.Stats.Seconds = float64(d.Microseconds()) / 1e6
	r.summaryCounts = map[chain.Severity]int{}
	for _, f := range r.Findings {
		r.summaryCounts[f.Severity]++
	}
	switch {
	case r.summaryCounts[chain.SeverityError] > 0:
		r.Verdict, r.ExitCode = VerdictFailed, ExitFailed
	case r.summaryCounts[chain.SeverityUnsupported] > 0:
		r.Verdict, r.ExitCode = VerdictError, ExitError
	case r.summaryCounts[chain.SeverityInconclusive] > 0:
		r.Verdict, r.ExitCode = VerdictInconclusive, ExitInconclusive
	default:
		r.Verdict, r.ExitCode = VerdictVerified, ExitVerified
	}
}

func writeJSON(w io.Writer, r *Report) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		panic(err) // every member is a plain value
	}
	w.Write(append(b, '\n'))
}

// writeText prints the report for people. Every string that comes from an
// input goes through clean: a report must not carry control characters an
// attacker chose (a payloadType, a keyid or a gate id holding
// "\x1b[2J\x1b[H...VERIFIED" would clear the auditor's terminal and print a
// verdict of its own).
func (r *Report) writeText(w io.Writer) {
	fmt.Fprintf(w, "certverify %s: %s (exit %d)\n", r.Command, strings.ToUpper(r.Verdict), r.ExitCode)
	if c := r.Chain; c != nil {
		fmt.Fprintf(w, "chain %s: %d records", clean(orNone(c.ChainID)), c.Records)
		if c.Head != "" {
			fmt.Fprintf(w, ", head %s (sequence %d)", clean(c.Head), *c.HeadSequence)
		}
		// A grade derived from records that failed verification (or from
		// no records at all) would read as a result: it is withheld.
		grade := clean(c.ProcessGrade)
		if r.summaryCounts[chain.SeverityError] > 0 {
			grade = "not derived (verification failed)"
		}
		fmt.Fprintf(w, "\n  merkle root %s, closed %v, operations %d, grade %s\n", clean(c.MerkleRoot), c.Closed, c.Operations, grade)
	}
	if c := r.Certificate; c != nil && c.Certificate != nil {
		fmt.Fprintf(w, "certificate %s for boundary %s", clean(c.Certificate.CertificateID), clean(c.Certificate.TaskBoundaryID))
		switch {
		case c.Signed && !c.checked:
			fmt.Fprint(w, ", signed (signature not checked: no --trust)")
		case c.Signed && len(c.Signers) == 0:
			fmt.Fprint(w, ", signed by no key of the trust file")
		case c.Signed:
			fmt.Fprintf(w, ", signed by %s", clean(strings.Join(c.Signers, ", ")))
		default:
			fmt.Fprint(w, ", unsigned")
		}
		fmt.Fprintln(w)
		if ch := r.Chain; ch != nil {
			// The approvals that let escalated operations run: what an
			// auditor of a certificate asks first after its grade, and,
			// as the grade, withheld when the records failed verification.
			switch n := ch.GateSummary.ApprovalCount; {
			case r.summaryCounts[chain.SeverityError] > 0:
				fmt.Fprintln(w, "  approvals not counted (verification failed)")
			case n > 0 && !c.checked:
				fmt.Fprintf(w, "  approvals %d (not checked against approver keys: no --trust)\n", n)
			case n > 0:
				fmt.Fprintf(w, "  approvals %d (each checked against the trust file's approver keys)\n", n)
			default:
				fmt.Fprintln(w, "  approvals 0")
			}
		}
	}
	if rec := r.Record; rec != nil {
		fmt.Fprintf(w, "record %s: chain %s, sequence %d, chain_hash %s\n", clean(rec.RecordID), clean(rec.ChainID), rec.Sequence, clean(rec.ChainHash))
	}
	for _, cp := range r.Checkpoints {
		fmt.Fprintf(w, "checkpoint %s size %d: verified %v, signers %s\n", clean(cp.Origin), cp.Size, cp.Verified, clean(orNone(strings.Join(cp.Signers, ", "))))
	}
	for _, a := range r.Anchors {
		fmt.Fprintf(w, "anchor %s: size %d, covers head %v, verified %v\n", a.Kind, a.Size, a.Covers, a.Verified)
	}
	for _, f := range r.Findings {
		loc := ""
		if f.Line != nil {
			loc += fmt.Sprintf("line %d ", *f.Line)
		}
		if f.Sequence != nil {
			loc += fmt.Sprintf("(sequence %d) ", *f.Sequence)
		}
		fmt.Fprintf(w, "%-12s %s%s: %s\n", f.Severity, loc, f.Code, clean(f.Message))
		if f.Expected != "" || f.Actual != "" {
			fmt.Fprintf(w, "             expected %s\n             actual   %s\n", clean(orNone(f.Expected)), clean(orNone(f.Actual)))
		}
	}
	if r.FindingsOmitted > 0 {
		fmt.Fprintf(w, "… %d more findings omitted (--max-findings)\n", r.FindingsOmitted)
	}
	fmt.Fprintf(w, "%d error(s), %d warning(s); %d records, %d bytes\n",
		r.summaryCounts[chain.SeverityError], r.summaryCounts[chain.SeverityWarning], r.Stats.Records, r.Stats.Bytes)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// clean returns s with what a terminal would interpret escaped: C0 and C1
// control characters, DEL, line and paragraph separators, bidirectional
// formatting characters (which reorder what is shown) and bytes that are
// not UTF-8. Other text, backslashes included, is kept as it is.
func clean(s string) string {
	i := strings.IndexFunc(s, unsafeRune)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		if !unsafeRune(r) {
			b.WriteRune(r)
			continue
		}
		switch {
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r < 0xa0, r == utf8.RuneError:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r == 0x2028, r == 0x2029,
		r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
