package snapshot_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/snapshot"
)

func valid(t testing.TB) []byte {
	b, err := os.ReadFile("testdata/valid.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseValid(t *testing.T) {
	data := valid(t)
	s, err := snapshot.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, data) {
		t.Fatalf("re-encoding differs:\n%s\n%s", out, data)
	}
	if _, err := snapshot.Parse(bytes.TrimSuffix(data, []byte("\n"))); err != nil {
		t.Fatalf("without the trailing newline: %v", err)
	}
}

// mutant applies f to the decoded JSON and returns canonical bytes; with
// reseal, the digest is recomputed so that only the mutated invariant can
// make Parse fail.
func mutant(t *testing.T, data []byte, reseal bool, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	f(m)
	if reseal {
		body := map[string]any{}
		for k, v := range m {
			switch k {
			case "digest", "release_state", "activated_at", "activated_by":
			default:
				body[k] = v
			}
		}
		b, err := jcs.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		m["digest"] = sha256hex(b)
	}
	out, err := jcs.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// walk visits every object in v with its JSON path.
func walk(v any, path string, f func(path string, obj map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		f(path, v)
		for k, sub := range v {
			walk(sub, path+"."+k, f)
		}
	case []any:
		for i, sub := range v {
			walk(sub, fmt.Sprintf("%s[%d]", path, i), f)
		}
	}
}

func objects(t *testing.T, data []byte) []string {
	var m any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	var paths []string
	walk(m, "", func(p string, _ map[string]any) { paths = append(paths, p) })
	slices.Sort(paths)
	return paths
}

func at(m map[string]any, path string) map[string]any {
	var found map[string]any
	walk(m, "", func(p string, obj map[string]any) {
		if p == path {
			found = obj
		}
	})
	return found
}

// TestEveryMissingMember removes each member of each object, one at a time.
func TestEveryMissingMember(t *testing.T) {
	data := valid(t)
	n := 0
	for _, path := range objects(t, data) {
		var m map[string]any
		json.Unmarshal(data, &m)
		for key := range at(m, path) {
			if (path == "" && key == "digest") || (path == "" && key == "kind") {
				continue
			}
			bad := mutant(t, data, true, func(m map[string]any) { delete(at(m, path), key) })
			if _, err := snapshot.Parse(bad); err == nil {
				t.Errorf("removing %s.%s: Parse accepted it", path, key)
			}
			n++
		}
	}
	if n < 200 {
		t.Fatalf("only %d mutations", n)
	}
}

// TestEveryUnknownMember adds an unknown member to each object.
func TestEveryUnknownMember(t *testing.T) {
	data := valid(t)
	for _, path := range objects(t, data) {
		bad := mutant(t, data, true, func(m map[string]any) { at(m, path)["x_unknown"] = "1" })
		if _, err := snapshot.Parse(bad); err == nil {
			t.Errorf("unknown member in %q: Parse accepted it", path)
		}
	}
}

// TestEveryNull sets each member to null; only the documented nullable
// members may take it, and then the snapshot must still fail or be valid.
func TestEveryNull(t *testing.T) {
	data := valid(t)
	nullable := map[string]bool{"activated_at": true, "activated_by": true, "target": true, "target_kind": true,
		"approver_class": true, "expires_after_microseconds": true, "shell": true, "tool": true, "resource": true,
		"window_microseconds": true, "not_before": true, "expires_at": true}
	for _, path := range objects(t, data) {
		var m map[string]any
		json.Unmarshal(data, &m)
		for key, v := range at(m, path) {
			if v == nil || nullable[key] || (path == "" && key == "digest") {
				continue // a resealed mutant gets its digest back
			}
			bad := mutant(t, data, true, func(m map[string]any) { at(m, path)[key] = nil })
			if _, err := snapshot.Parse(bad); err == nil {
				t.Errorf("null %s.%s: Parse accepted it", path, key)
			}
		}
	}
}

func TestSemanticMutations(t *testing.T) {
	data := valid(t)
	rules := func(m map[string]any) []any { return m["compiled_rules"].([]any) }
	rule := func(m map[string]any, i int) map[string]any { return rules(m)[i].(map[string]any) }
	expansion := func(m map[string]any) map[string]any { return m["expansions"].([]any)[0].(map[string]any) }
	cases := []struct {
		name string
		f    func(m map[string]any)
		want string
	}{
		{"unknown kind", func(m map[string]any) { rule(m, 0)["kind"] = "teleport" }, "unknown rule kind"},
		{"wrong variant member", func(m map[string]any) { r := rule(m, 0); delete(r, "action"); r["pattern"] = "x" }, ""},
		{"kind swapped", func(m map[string]any) { rule(m, 0)["kind"] = "network" }, ""},
		{"order", func(m map[string]any) { rule(m, 1)["order"] = json.Number("7") }, "order"},
		{"rule id", func(m map[string]any) { rule(m, 0)["rule_id"] = "action.allow:bashx" }, "does not match its content"},
		{"unsorted", func(m map[string]any) {
			rs := rules(m)
			rs[0], rs[1] = rs[1], rs[0]
			rule(m, 0)["order"], rule(m, 1)["order"] = json.Number("0"), json.Number("1")
		}, "sorted"},
		{"effect", func(m map[string]any) { rule(m, 0)["effect"] = "require_approval" }, ""},
		{"bad pattern", func(m map[string]any) { rule(m, 0)["action"] = "a/b"; rule(m, 0)["rule_id"] = "action.allow:a/b" }, "pattern"},
		{"uppercase deny", func(m map[string]any) {
			rule(m, 4)["target"] = "git push --FORCE *"
			rule(m, 4)["rule_id"] = "action.deny:bash:git push --FORCE *"
		}, "lowercase"},
		{"gate unknown rule", func(m map[string]any) {
			g := m["gate_bindings"].([]any)[0].(map[string]any)
			g["rule_ids"] = append(g["rule_ids"].([]any), "zzz")
		}, "unknown rule"},
		{"rule unbound", func(m map[string]any) {
			g := m["gate_bindings"].([]any)[2].(map[string]any)
			g["rule_ids"] = g["rule_ids"].([]any)[1:]
		}, "bound to no gate"},
		{"format", func(m map[string]any) { m["format"] = "polc.snapshot/v2" }, "unsupported format"},
		{"algorithm", func(m map[string]any) { m["digest_algorithm"] = "sha512" }, "unsupported digest algorithm"},
		{"uppercase uuid", func(m map[string]any) { m["policy_id"] = strings.ToUpper(m["policy_id"].(string)) }, "UUID"},
		{"release state", func(m map[string]any) { m["release_state"] = "active" }, "activated_at"},
		{"integer as string", func(m map[string]any) { rule(m, 0)["order"] = "0" }, "integer"},
		{"scope unsorted", func(m map[string]any) { m["principal_scope"] = []any{"b", "a"} }, "sorted"},
		{"expansion float", func(m map[string]any) { expansion(m)["values"] = []any{json.Number("1.5")} }, "values[0]"},
		{"expansion beyond 2^53", func(m map[string]any) { expansion(m)["values"] = []any{"x", json.Number("9007199254740993")} }, "values[1]"},
		{"expansion boolean", func(m map[string]any) { expansion(m)["values"] = []any{true} }, "values[0]"},
		{"expansion object", func(m map[string]any) { expansion(m)["values"] = []any{map[string]any{}} }, "values[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := mutant(t, data, true, c.f)
			_, err := snapshot.Parse(bad)
			if err == nil {
				t.Fatal("Parse accepted the mutant")
			}
			if c.want != "" && !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestDigestMismatch(t *testing.T) {
	data := valid(t)
	bad := mutant(t, data, false, func(m map[string]any) { m["version"] = "0.3.2" })
	_, err := snapshot.Parse(bad)
	var dm *snapshot.DigestMismatchError
	if !errors.As(err, &dm) {
		t.Fatalf("got %v, want *DigestMismatchError", err)
	}
	if dm.Declared == dm.Computed || len(dm.Computed) != 64 {
		t.Fatalf("bad mismatch: %+v", dm)
	}
	// Activation members are outside the digest.
	act := mutant(t, data, false, func(m map[string]any) {
		m["release_state"] = "active"
		m["activated_at"] = "2026-11-30T00:00:00.000000Z"
		m["activated_by"] = map[string]any{"kind": "user", "id": "alice"}
	})
	if _, err := snapshot.Parse(act); err != nil {
		t.Fatalf("activation changed the digest: %v", err)
	}
}

func TestNonCanonical(t *testing.T) {
	data := valid(t)
	var buf bytes.Buffer
	json.Indent(&buf, data, "", " ")
	if _, err := snapshot.Parse(buf.Bytes()); err == nil || !strings.Contains(err.Error(), "canonical") {
		t.Fatalf("pretty-printed snapshot: got %v", err)
	}
	if _, err := snapshot.Parse(append(bytes.Clone(data), '\n')); err == nil {
		t.Fatal("two trailing newlines accepted")
	}
}

func FuzzParse(f *testing.F) {
	small, err := os.ReadFile("testdata/small.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(small)
	f.Add([]byte(`{}`))
	// Not UTF-8, and a NUL escaped: a snapshot holding either is refused.
	f.Add(bytes.Replace(small, []byte(`":"`), []byte("\":\"\xff"), 1))
	f.Add(bytes.Replace(small, []byte(`":"`), []byte(`":"\u0000`), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := snapshot.Parse(data)
		if err != nil {
			return
		}
		out, err := s.Marshal()
		if err != nil {
			t.Fatalf("parsed snapshot does not marshal: %v", err)
		}
		if !bytes.Equal(bytes.TrimSuffix(out, []byte("\n")), bytes.TrimSuffix(data, []byte("\n"))) {
			t.Fatalf("accepted input that does not re-encode identically")
		}
	})
}
