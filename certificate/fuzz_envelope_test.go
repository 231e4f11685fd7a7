package certificate_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"polc.dev/polc/certificate"
	"polc.dev/polc/internal/evidencegen"
	"polc.dev/polc/internal/jcs"
)

// FuzzParseEnvelope checks ParseEnvelope: it never panics, and an accepted
// envelope re-encodes without loss.
//
// The envelope format is deliberately not strict on input: Sign writes
// canonical JSON, but ParseEnvelope accepts any I-JSON spelling and, as
// DSSE requires of verifiers, standard and URL-safe base64, padded or not
// (the signatures cover the decoded payload, not its spelling). So an
// accepted envelope need not re-encode byte for byte. What the doc does
// promise, and this target asserts, is:
//
//   - between 1 and MaxSignatures signatures, each with a non-empty sig;
//   - the canonical re-encoding (Sign's form: jcs.Marshal and "\n") parses
//     back to the same envelope and payload;
//   - an input already in that form (canonical JSON, at most one trailing
//     newline, every signature with a keyid) re-encodes to exactly its
//     bytes: members are strings where the format says strings, so nothing
//     is coerced (a null read as "" would not survive).
func FuzzParseEnvelope(f *testing.F) {
	s := evidencegen.NewSmall()
	f.Add(s.Signed)
	f.Add(bytes.TrimSuffix(s.Signed, []byte("\n")))
	f.Add([]byte(`{"payload":"","payloadType":"x","signatures":[{"keyid":"k","sig":"AA=="}]}`))
	f.Add([]byte(` {"signatures":[{"sig":"AA"}],"payloadType":"x","payload":"_-8"}`))
	f.Add([]byte("{\"payload\":\"\",\"payloadType\":\"x\xff\",\"signatures\":[{\"keyid\":\"k\",\"sig\":\"AA==\"}]}")) // not UTF-8
	f.Fuzz(func(t *testing.T, data []byte) {
		env, payload, err := certificate.ParseEnvelope(data)
		if err != nil {
			return
		}
		if n := len(env.Signatures); n < 1 || n > certificate.MaxSignatures {
			t.Fatalf("accepted %d signatures", n)
		}
		for _, sig := range env.Signatures {
			if sig.Sig == "" {
				t.Fatal("accepted an empty sig")
			}
		}
		canon, err := jcs.Marshal(env)
		if err != nil {
			t.Fatalf("accepted envelope does not encode: %v", err)
		}
		env2, payload2, err := certificate.ParseEnvelope(append(canon, '\n'))
		if err != nil || !reflect.DeepEqual(env, env2) || !bytes.Equal(payload, payload2) {
			t.Fatalf("re-encoded envelope does not parse back the same: %v\n%q\n%q", err, data, canon)
		}
		body := bytes.TrimSuffix(data, []byte("\n"))
		if jcs.IsCanonical(body) && allKeyIDs(body) && !bytes.Equal(canon, body) {
			t.Fatalf("canonical envelope does not re-encode identically:\n%q\n%q", body, canon)
		}
	})
}

// allKeyIDs reports whether every signature object of the envelope JSON
// has a keyid member (Envelope always writes one, "" when it was absent).
func allKeyIDs(data []byte) bool {
	var probe struct {
		Signatures []map[string]json.RawMessage `json:"signatures"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return false
	}
	for _, s := range probe.Signatures {
		if _, ok := s["keyid"]; !ok {
			return false
		}
	}
	return true
}
