package certificate

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/mod/sumdb/note"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/jcs"
)

// MaxSignatures bounds the signatures of an envelope.
const MaxSignatures = 100

// Envelope is a DSSE envelope.
type Envelope struct {
	Payload     string      `json:"payload"`
	PayloadType string      `json:"payloadType"`
	Signatures  []Signature `json:"signatures"`
}

// Signature is one DSSE signature. KeyID is an unauthenticated hint.
type Signature struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

// PAE returns DSSE's pre-authentication encoding of a payload.
func PAE(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteByte(' ')
	b.WriteString(payloadType)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteByte(' ')
	b.Write(payload)
	return b.Bytes()
}

// Sign returns the DSSE envelope file (canonical JSON and a newline) of c,
// signed by each signer over the PAE of its canonical JSON. Signers are
// signed-note signers (note.NewSigner on a key from polc.dev/polc/keys.Generate, or keys.ReadSigner on a `polc keygen` file); the
// keyid is the signer's "name+hex8".
func Sign(c *Certificate, signers ...note.Signer) ([]byte, error) {
	if len(signers) == 0 {
		return nil, errors.New("certificate: no signer")
	}
	payload, err := c.Marshal()
	if err != nil {
		return nil, err
	}
	if _, err := Parse(payload); err != nil {
		return nil, err
	}
	env := Envelope{Payload: base64.StdEncoding.EncodeToString(payload), PayloadType: PayloadType}
	pae := PAE(PayloadType, payload)
	for _, s := range signers {
		sig, err := s.Sign(pae)
		if err != nil {
			return nil, err
		}
		env.Signatures = append(env.Signatures, Signature{KeyID: fmt.Sprintf("%s+%08x", s.Name(), s.KeyHash()), Sig: base64.StdEncoding.EncodeToString(sig)})
	}
	b, err := jcs.Marshal(env)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// decodeB64 accepts standard and URL-safe base64, padded or not, as DSSE
// requires of verifiers.
func decodeB64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// jsonString decodes raw, a member value, into s. Unlike json.Unmarshal
// into a string it rejects null (which would read as "").
func jsonString(raw json.RawMessage, s *string) bool {
	return len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, s) == nil
}

// ParseEnvelope decodes a DSSE envelope: I-JSON (duplicate keys rejected),
// exactly the members payload, payloadType and signatures, each signature
// with sig and an optional keyid, between 1 and MaxSignatures signatures.
func ParseEnvelope(data []byte) (*Envelope, []byte, error) {
	if len(data) > MaxCertificateBytes {
		return nil, nil, &ParseError{fmt.Sprintf("envelope exceeds %d bytes", MaxCertificateBytes)}
	}
	if _, err := jcs.Transform(data); err != nil {
		return nil, nil, &ParseError{"envelope is not JSON: " + err.Error()}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, nil, &ParseError{"envelope is not an object"}
	}
	for k := range raw {
		if k != "payload" && k != "payloadType" && k != "signatures" {
			return nil, nil, &ParseError{"envelope: unknown member " + strconv.Quote(k)}
		}
	}
	var env Envelope
	if !jsonString(raw["payload"], &env.Payload) || !jsonString(raw["payloadType"], &env.PayloadType) {
		return nil, nil, &ParseError{"envelope: payload and payloadType must be strings"}
	}
	var sigs []map[string]json.RawMessage
	if err := json.Unmarshal(raw["signatures"], &sigs); err != nil || len(sigs) == 0 {
		return nil, nil, &ParseError{"envelope: signatures must be a non-empty array of objects"}
	}
	if len(sigs) > MaxSignatures {
		return nil, nil, &ParseError{fmt.Sprintf("envelope: more than %d signatures", MaxSignatures)}
	}
	for _, s := range sigs {
		var sig Signature
		for k := range s {
			if k != "keyid" && k != "sig" {
				return nil, nil, &ParseError{"envelope: unknown signature member " + strconv.Quote(k)}
			}
		}
		if !jsonString(s["sig"], &sig.Sig) || sig.Sig == "" {
			return nil, nil, &ParseError{"envelope: every signature needs a sig string"}
		}
		if k, ok := s["keyid"]; ok && !jsonString(k, &sig.KeyID) {
			return nil, nil, &ParseError{"envelope: keyid must be a string"}
		}
		env.Signatures = append(env.Signatures, sig)
	}
	payload, err := decodeB64(env.Payload)
	if err != nil {
		return nil, nil, &ParseError{"envelope: payload is not base64"}
	}
	return &env, payload, nil
}

// SignatureCheck is the outcome of checking an envelope's signatures.
type SignatureCheck struct {
	Payload []byte
	// Signers are the trusted certifier keys whose signatures verified.
	Signers []*chain.Key
	// Findings: bad_signature, unknown_key, key_role_mismatch,
	// ignored_signature, malformed_certificate (unsupported payload type).
	Findings []chain.Finding
}

// OpenEnvelope parses an envelope and checks its signatures against trust
// (nil: nothing verifies, and no finding is added). A signature whose keyid
// names a trusted key must verify with that key (else bad_signature, which
// rejects the envelope); other signatures are tried against every trusted
// key and ignored when none verifies. Signatures count once per key.
func OpenEnvelope(data []byte, trust *chain.Trust) (*SignatureCheck, error) {
	env, payload, err := ParseEnvelope(data)
	if err != nil {
		return nil, err
	}
	sc := &SignatureCheck{Payload: payload}
	add := func(f chain.Finding) { sc.Findings = append(sc.Findings, f) }
	pae := PAE(env.PayloadType, payload)
	seen := map[*chain.Key]bool{}
	var wrongRole []*chain.Key
	var unknown []string
	bad := false
	for _, s := range env.Signatures {
		sig, err := decodeB64(s.Sig)
		if err != nil {
			return nil, &ParseError{"envelope: signature is not base64"}
		}
		if trust == nil {
			continue
		}
		var key *chain.Key
		for _, k := range trust.Keys {
			if k.ID() == s.KeyID {
				key = k
			}
		}
		if key != nil && !key.Verify(pae, sig) {
			add(chain.NewFinding(chain.CodeBadSignature, "certificate signature by trusted key "+key.ID()+" does not verify").Values("a valid signature by "+key.ID(), "an invalid one"))
			bad = true
			continue
		}
		if key == nil {
			for _, k := range trust.Keys {
				if k.Verify(pae, sig) {
					key = k
					break
				}
			}
		}
		if key == nil {
			unknown = append(unknown, s.KeyID)
			continue
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		if key.Role != chain.RoleCertifier {
			wrongRole = append(wrongRole, key)
			continue
		}
		sc.Signers = append(sc.Signers, key)
	}
	switch {
	case bad:
		sc.Signers = nil
	case len(sc.Signers) > 0:
		for _, id := range unknown {
			add(chain.NewFinding(chain.CodeIgnoredSignature, "signature with keyid "+strconv.Quote(id)+" verifies with no trusted key; ignored"))
		}
		for _, k := range wrongRole {
			add(chain.NewFinding(chain.CodeIgnoredSignature, "signature by "+string(k.Role)+" key "+k.ID()+" ignored on a certificate"))
		}
	case len(wrongRole) > 0:
		add(chain.NewFinding(chain.CodeKeyRoleMismatch, "certificate signed only by "+string(wrongRole[0].Role)+" key "+wrongRole[0].ID()).Values(string(chain.RoleCertifier), string(wrongRole[0].Role)))
	case trust != nil:
		add(chain.NewFinding(chain.CodeUnknownKey, "certificate is signed only by keys the trust file does not list").Values("a certifier key of the trust file", env.Signatures[0].KeyID))
	}
	if env.PayloadType != PayloadType {
		add(chain.NewFinding(chain.CodeMalformedCertificate, "unsupported payloadType").Values(PayloadType, env.PayloadType))
		sc.Signers = nil
	}
	return sc, nil
}
