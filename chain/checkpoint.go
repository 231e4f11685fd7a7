package chain

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// OriginPrefix starts the origin line of every polc checkpoint.
const OriginPrefix = "polc.dev/chain/"

// MaxNoteBytes bounds a checkpoint note or proof file.
const MaxNoteBytes = 1 << 16

// Checkpoint is the body of a signed checkpoint: the chain, the number of
// records it covers and the RFC 6962 root over their chain hashes.
type Checkpoint struct {
	ChainID string
	Size    uint64
	Root    Hash
}

// Origin returns the checkpoint origin of a chain.
func Origin(chainID string) string { return OriginPrefix + chainID }

// Body returns the checkpoint text, exactly three lines:
//
//	polc.dev/chain/<chain_id>
//	<size in decimal, no leading zeros>
//	<standard base64 of the 32-byte root>
func (c Checkpoint) Body() string {
	return Origin(c.ChainID) + "\n" + strconv.FormatUint(c.Size, 10) + "\n" + base64.StdEncoding.EncodeToString(c.Root[:]) + "\n"
}

// ParseCheckpoint parses a checkpoint body. It accepts only the exact form
// Body produces: no extension lines, canonical decimal size, canonical
// base64 of 32 bytes, an origin naming a lowercase UUID.
func ParseCheckpoint(text string) (Checkpoint, error) {
	var c Checkpoint
	lines := strings.Split(text, "\n")
	if len(lines) != 4 || lines[3] != "" {
		return c, errors.New("checkpoint body must be exactly three lines: origin, size, root")
	}
	id, ok := strings.CutPrefix(lines[0], OriginPrefix)
	if !ok || !IsUUID(id) {
		return c, fmt.Errorf("origin %q is not %s<chain_id>", lines[0], OriginPrefix)
	}
	n, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil || lines[1] != strconv.FormatUint(n, 10) {
		return c, fmt.Errorf("size %q is not a canonical decimal", lines[1])
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != 32 || base64.StdEncoding.EncodeToString(root) != lines[2] {
		return c, fmt.Errorf("root %q is not the base64 of 32 bytes", lines[2])
	}
	c.ChainID, c.Size = id, n
	copy(c.Root[:], root)
	return c, nil
}

// SignCheckpoint returns the signed note of c. Signers are typically built
// with note.NewSigner from a key made by polc.dev/polc/keys.Generate (or keys.ReadSigner on a `polc keygen` file).
func SignCheckpoint(c Checkpoint, signers ...note.Signer) ([]byte, error) {
	return note.Sign(&note.Note{Text: c.Body()}, signers...)
}

// SignedNote is a checkpoint note checked against a trust file.
type SignedNote struct {
	Checkpoint Checkpoint
	Text       string
	// Signers are the trusted log keys whose signatures verified.
	Signers []*Key
	// Findings are signature findings: bad_signature, unknown_key,
	// key_role_mismatch, ignored_signature. Validity windows are checked
	// later, against a signed time (see CheckValidity).
	Findings []Finding
}

// Anchored reports whether at least one trusted log key signed the note and
// no signature finding is an error.
func (s *SignedNote) Anchored() bool {
	if len(s.Signers) == 0 {
		return false
	}
	for _, f := range s.Findings {
		if f.Severity == SeverityError {
			return false
		}
	}
	return true
}

// NoteError is a note or checkpoint that does not parse.
type NoteError struct{ Msg string }

func (e *NoteError) Error() string { return "malformed checkpoint: " + e.Msg }

// OpenCheckpoint parses a signed checkpoint note and checks its signatures
// against trust (which may be nil: then no signature can verify and the
// result is simply unanchored). It returns a *NoteError for input that is
// not a signed note with a valid checkpoint body; every other problem is a
// finding in the result.
func OpenCheckpoint(msg []byte, trust *Trust) (*SignedNote, error) {
	if len(msg) > MaxNoteBytes {
		return nil, &NoteError{fmt.Sprintf("note exceeds %d bytes", MaxNoteBytes)}
	}
	sn := &SignedNote{}
	n, err := note.Open(msg, trust.verifiers())
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case err == nil:
	case errors.As(err, &unverified):
		n = unverified.Note
	case errors.As(err, &invalid):
		id := fmt.Sprintf("%s+%08x", invalid.Name, invalid.Hash)
		// Parse the text for the report even though the note is rejected.
		text, _, _ := strings.Cut(string(msg), "\n\n")
		c, perr := ParseCheckpoint(text + "\n")
		if perr != nil {
			return nil, &NoteError{perr.Error()}
		}
		sn.Checkpoint, sn.Text = c, text+"\n"
		sn.Findings = append(sn.Findings, NewFinding(CodeBadSignature, "checkpoint signature by trusted key "+id+" does not verify").Values("a valid signature by "+id, "an invalid one"))
		return sn, nil
	default:
		return nil, &NoteError{err.Error()}
	}
	c, err := ParseCheckpoint(n.Text)
	if err != nil {
		return nil, &NoteError{err.Error()}
	}
	sn.Checkpoint, sn.Text = c, n.Text
	var wrongRole []*Key
	for _, s := range n.Sigs {
		k := trust.Lookup(s.Name, s.Hash)
		if k.Role == RoleLog {
			sn.Signers = append(sn.Signers, k)
		} else {
			wrongRole = append(wrongRole, k)
		}
	}
	switch {
	case len(sn.Signers) > 0:
		for _, s := range n.UnverifiedSigs {
			sn.Findings = append(sn.Findings, NewFinding(CodeIgnoredSignature, fmt.Sprintf("signature by unknown key %s+%08x ignored", s.Name, s.Hash)))
		}
		for _, k := range wrongRole {
			sn.Findings = append(sn.Findings, NewFinding(CodeIgnoredSignature, "signature by "+string(k.Role)+" key "+k.ID()+" ignored on a checkpoint"))
		}
	case len(wrongRole) > 0:
		sn.Findings = append(sn.Findings, NewFinding(CodeKeyRoleMismatch, "checkpoint signed only by "+string(wrongRole[0].Role)+" key "+wrongRole[0].ID()).Values(string(RoleLog), string(wrongRole[0].Role)))
	case trust != nil && len(n.UnverifiedSigs) > 0:
		s := n.UnverifiedSigs[0]
		sn.Findings = append(sn.Findings, NewFinding(CodeUnknownKey, "checkpoint is signed only by keys the trust file does not list").Values("a log key of the trust file", fmt.Sprintf("%s+%08x", s.Name, s.Hash)))
	}
	return sn, nil
}

// CheckValidity checks every signer's validity window against the signed
// time t (nil when no signed time is available). It returns key_not_valid
// (error) or validity_unchecked (inconclusive) findings.
func CheckValidity(signers []*Key, t *time.Time, what string) []Finding {
	var out []Finding
	for _, k := range signers {
		if !k.Windowed() {
			continue
		}
		if t == nil {
			out = append(out, NewFinding(CodeValidityUnchecked, "key "+k.ID()+" has a validity window but no signed time is available for the "+what).Values(k.Window(), "unknown"))
			continue
		}
		if !k.ValidAt(*t) {
			out = append(out, NewFinding(CodeKeyNotValid, "key "+k.ID()+" was not valid at the "+what+"'s signed time").Values(k.Window(), t.UTC().Format(TimeFormat)))
		}
	}
	return out
}
