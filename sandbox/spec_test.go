package sandbox

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func validWire() wireSpec {
	w := newWireSpec(Spec{
		Read:    []string{"/usr/share"},
		Write:   []string{"/tmp/ws"},
		Execute: []string{"/opt/tool"},
		Deny:    []string{"/tmp/ws/secrets"},
		Network: NetworkProxy, ProxySocket: "/run/p.sock", ProxyPort: 3128,
		Env:    []string{"PATH=/usr/bin", "HOME=/tmp/ws"},
		Dir:    "/tmp/ws",
		Limits: Limits{CPUSeconds: 10, FileSizeBytes: 1 << 20, Processes: 64},
	}, []string{"bash", "-c", "true"})
	w.HostNetNS = nsID{Dev: 4, Ino: 4026531840}
	w.HostUserNS = nsID{Dev: 4, Ino: 4026531837}
	return w
}

func TestParseWireRoundTrip(t *testing.T) {
	w := validWire()
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseWire(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, w) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *got, w)
	}
}

func TestParseWireStrict(t *testing.T) {
	data, _ := json.Marshal(validWire())
	s := string(data)
	cases := []struct{ name, in, want string }{
		{"unknown field", strings.Replace(s, `{"version":2`, `{"version":2,"extra":true`, 1), "unknown field"},
		{"unknown nested field", strings.Replace(s, `"processes":64`, `"processes":64,"memory":1`, 1), "unknown field"},
		{"duplicate field", strings.Replace(s, `{"version":2`, `{"version":2,"argv":["x"]`, 1), "given twice"},
		{"duplicate nested field", strings.Replace(s, `"processes":64`, `"processes":64,"processes":1`, 1), "given twice"},
		{"trailing data", s + `{}`, "trailing data"},
		{"other version", strings.Replace(s, `"version":2`, `"version":3`, 1), "version 3"},
		{"no version", strings.Replace(s, `"version":2,`, ``, 1), "version 0"},
		{"unknown network", strings.Replace(s, `"network":"proxy"`, `"network":"open"`, 1), "unknown network"},
		{"network as number", strings.Replace(s, `"network":"proxy"`, `"network":2`, 1), "network"},
		{"negative limit", strings.Replace(s, `"processes":64`, `"processes":-1`, 1), "processes"},
		{"relative path", strings.Replace(s, `"/usr/share"`, `"usr/share"`, 1), "not absolute"},
		{"not an object", `[]`, "spec"},
		{"empty", ``, "spec"},
		{"too big", `{"argv":["` + strings.Repeat("a", maxWireBytes) + `"]}`, "more than"},
	}
	for _, c := range cases {
		_, err := parseWire([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error mentioning %q", c.name, err, c.want)
		}
	}
}

// FuzzParseSpec: the parser never panics, and what it accepts is valid and
// survives a round trip unchanged.
func FuzzParseSpec(f *testing.F) {
	data, _ := json.Marshal(validWire())
	f.Add(data)
	f.Add([]byte(`{"version":2,"argv":["true"],"network":"allow"}`))
	f.Add([]byte(`{"version":2,"argv":["true"],"network":"deny","limits":{"cpu_seconds":1}}`))
	f.Add([]byte(`{"version":2,"argv":["a"],"argv":["b"]}`))
	f.Add([]byte(`{"a":{"b":[{"c":1,"c":2}]}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		w, err := parseWire(in)
		if err != nil {
			return
		}
		if err := w.validate(); err != nil {
			t.Fatalf("accepted an invalid spec: %v", err)
		}
		out, err := json.Marshal(w)
		if err != nil {
			t.Fatalf("re-encoding: %v", err)
		}
		w2, err := parseWire(out)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", out, err)
		}
		if !reflect.DeepEqual(w, w2) {
			t.Fatalf("round trip changed the spec:\n%+v\n%+v", w, w2)
		}
	})
}
