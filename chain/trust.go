package chain

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// Role says what a trusted key may sign.
type Role string

// The roles of a trust file.
const (
	// RoleLog keys sign checkpoints.
	RoleLog Role = "log"
	// RoleCertifier keys sign task certificates.
	RoleCertifier Role = "certifier"
	// RoleApprover keys sign approvals (docs/approvals.md) for one
	// approver class, which the trust line names: approver:<class>.
	RoleApprover Role = "approver"
)

// MaxTrustBytes bounds a trust file.
const MaxTrustBytes = 1 << 20

// Key is one trusted verifier key. Its validity window, when set, is a closed
// interval compared with the time inside the signed artifact.
type Key struct {
	Role Role
	// Class is the approver class of a RoleApprover key ("" for the
	// other roles).
	Class      string
	VKey       string // name+hex8+base64(0x01 || public key)
	Name       string
	KeyHash    uint32
	Public     ed25519.PublicKey
	ValidFrom  *time.Time
	ValidUntil *time.Time
	Line       int // 1-based line in the trust file
	verifier   note.Verifier
}

// ID returns the key's "name+hex8" identifier, as used in DSSE keyids and
// signed-note signature lines.
func (k *Key) ID() string { return fmt.Sprintf("%s+%08x", k.Name, k.KeyHash) }

// Windowed reports whether the key has a validity window.
func (k *Key) Windowed() bool { return k.ValidFrom != nil || k.ValidUntil != nil }

// ValidAt reports whether t lies inside the key's closed validity window.
func (k *Key) ValidAt(t time.Time) bool {
	if k.ValidFrom != nil && t.Before(*k.ValidFrom) {
		return false
	}
	if k.ValidUntil != nil && t.After(*k.ValidUntil) {
		return false
	}
	return true
}

// Window describes the validity window for messages.
func (k *Key) Window() string {
	f, u := "-∞", "+∞"
	if k.ValidFrom != nil {
		f = k.ValidFrom.UTC().Format(time.RFC3339Nano)
	}
	if k.ValidUntil != nil {
		u = k.ValidUntil.UTC().Format(time.RFC3339Nano)
	}
	return "[" + f + ", " + u + "]"
}

// Verify reports whether sig is the key's Ed25519 signature of msg.
func (k *Key) Verify(msg, sig []byte) bool { return ed25519.Verify(k.Public, msg, sig) }

// Trust is a parsed trust file: the only source of trust certverify has.
type Trust struct {
	Keys []*Key
}

// TrustError reports an invalid trust file line.
type TrustError struct {
	Line int
	Msg  string
}

func (e *TrustError) Error() string { return fmt.Sprintf("trust file line %d: %s", e.Line, e.Msg) }

// smallOrder lists the encodings of the Ed25519 points of small order (the
// libsodium blocklist), compared with the sign bit cleared. A public key of
// small order lets anyone forge signatures that verify.
var smallOrder = [][32]byte{
	{0x00}, // order 4
	{0x01}, // identity
	{0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05},
	{0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a},
	{0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, // p-1, order 2
	{0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, // p, non-canonical 0
	{0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, // p+1, non-canonical 1
}

// IsSmallOrder reports whether pub encodes a point of small order.
func IsSmallOrder(pub []byte) bool {
	if len(pub) != 32 {
		return false
	}
	var k [32]byte
	copy(k[:], pub)
	k[31] &= 0x7f
	for _, s := range smallOrder {
		if k == s {
			return true
		}
	}
	return false
}

// ParseTrust parses a trust file:
//
//	# comment
//	<role> <vkey> [valid_from=<RFC3339>] [valid_until=<RFC3339>]
//
// role is "log", "certifier" or "approver:<class>" (a key that signs
// approvals for that approver class: non-empty, no spaces); vkey is a signed-note Ed25519 verifier key
// (name+hex8+base64(0x01 || public key)). '#' starts a comment anywhere on a
// line. It rejects unknown roles or options, repeated options, malformed or
// small-order keys, a key listed twice, an empty window (valid_from after
// valid_until) and a file without keys; the error is a *TrustError.
func ParseTrust(data []byte) (*Trust, error) {
	if len(data) > MaxTrustBytes {
		return nil, &TrustError{0, fmt.Sprintf("file exceeds %d bytes", MaxTrustBytes)}
	}
	t := &Trust{}
	seen := make(map[string]int)
	for i, ln := range strings.Split(string(data), "\n") {
		n := i + 1
		if strings.ContainsRune(ln, '\r') {
			return nil, &TrustError{n, "carriage return (use \\n line endings)"}
		}
		if c := strings.IndexByte(ln, '#'); c >= 0 {
			ln = ln[:c]
		}
		fields := strings.Fields(ln)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 2 {
			return nil, &TrustError{n, "want <role> <vkey> [valid_from=…] [valid_until=…]"}
		}
		k := &Key{Role: Role(fields[0]), VKey: fields[1], Line: n}
		if class, ok := strings.CutPrefix(fields[0], string(RoleApprover)+":"); ok {
			if class == "" {
				return nil, &TrustError{n, "approver: names no class (want approver:<class>)"}
			}
			k.Role, k.Class = RoleApprover, class
		}
		if k.Role != RoleLog && k.Role != RoleCertifier && k.Role != RoleApprover {
			return nil, &TrustError{n, fmt.Sprintf("unknown role %q (want log, certifier or approver:<class>)", fields[0])}
		}
		if k.Role == RoleApprover && k.Class == "" {
			return nil, &TrustError{n, "approver needs a class (want approver:<class>)"}
		}
		v, err := note.NewVerifier(k.VKey)
		if err != nil {
			return nil, &TrustError{n, fmt.Sprintf("invalid verifier key: %v", err)}
		}
		k.verifier, k.Name, k.KeyHash = v, v.Name(), v.KeyHash()
		_, rest, _ := strings.Cut(k.VKey, "+")
		_, b64, _ := strings.Cut(rest, "+")
		raw, _ := base64.StdEncoding.DecodeString(b64)
		if len(raw) != 33 || raw[0] != 0x01 {
			return nil, &TrustError{n, "not an Ed25519 verifier key"}
		}
		k.Public = ed25519.PublicKey(bytes.Clone(raw[1:]))
		if IsSmallOrder(k.Public) {
			return nil, &TrustError{n, "public key is a point of small order (forgeable)"}
		}
		for _, opt := range fields[2:] {
			name, val, ok := strings.Cut(opt, "=")
			var dst **time.Time
			switch {
			case ok && name == "valid_from":
				dst = &k.ValidFrom
			case ok && name == "valid_until":
				dst = &k.ValidUntil
			default:
				return nil, &TrustError{n, fmt.Sprintf("unknown option %q (want valid_from=… or valid_until=…)", opt)}
			}
			if *dst != nil {
				return nil, &TrustError{n, "repeated option " + name}
			}
			tm, err := time.Parse(time.RFC3339Nano, val)
			if err != nil {
				return nil, &TrustError{n, fmt.Sprintf("%s: not an RFC 3339 time: %q", name, val)}
			}
			*dst = &tm
		}
		if k.ValidFrom != nil && k.ValidUntil != nil && k.ValidFrom.After(*k.ValidUntil) {
			return nil, &TrustError{n, "valid_from is after valid_until"}
		}
		if prev, dup := seen[k.ID()]; dup {
			return nil, &TrustError{n, fmt.Sprintf("key %s is already listed on line %d", k.ID(), prev)}
		}
		seen[k.ID()] = n
		t.Keys = append(t.Keys, k)
	}
	if len(t.Keys) == 0 {
		return nil, &TrustError{0, "no keys"}
	}
	return t, nil
}

// Lookup returns the key with the given name and key hash, or nil.
func (t *Trust) Lookup(name string, hash uint32) *Key {
	if t == nil {
		return nil
	}
	for _, k := range t.Keys {
		if k.Name == name && k.KeyHash == hash {
			return k
		}
	}
	return nil
}

// verifiers returns every key as a signed-note verifier list.
func (t *Trust) verifiers() note.Verifiers {
	var list []note.Verifier
	if t != nil {
		for _, k := range t.Keys {
			list = append(list, k.verifier)
		}
	}
	return note.VerifierList(list...)
}
