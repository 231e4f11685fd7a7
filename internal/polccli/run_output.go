package polccli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"polc.dev/polc/executor"
	"polc.dev/polc/harness"
)

// maxShownText bounds each text member of an action's result that polc run
// --show-output prints (stdout, stderr, a file's content, a body): the
// rest is counted, not shown.
const maxShownText = 4096

// resolveSecrets reads the values of a scenario's secrets (checked
// references) before anything runs: a secret that cannot be read is an
// error, never a run that might print it.
func resolveSecrets(refs map[string]any) (map[string]string, error) {
	vals := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(refs)) {
		v, err := harness.ResolveSecret(name, refs[name].(string), os.LookupEnv)
		if err != nil {
			return nil, err
		}
		vals[name] = v
	}
	return vals, nil
}

// resultOf is what the callable returned for out: a success's result, or
// the result a failure came with (bash's output for exit_status).
func resultOf(out executor.Outcome) (any, bool) {
	switch o := out.(type) {
	case *executor.Succeeded:
		return o.Result, true
	case *executor.Failed:
		return o.Result, o.Result != nil
	}
	return nil, false
}

// shown is v as polc run shows it: every string redacted, then bounded to
// maxShownText bytes (cut at a character boundary, the rest counted).
func shown(v any, secrets map[string]string) any {
	switch x := v.(type) {
	case string:
		return bounded(harness.Redact(x, secrets))
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = shown(e, secrets)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = shown(e, secrets)
		}
		return l
	case nil, bool, json.Number, int, int64, float64:
		return x
	}
	// Another Go value (a custom action's struct): shown as its JSON,
	// redacted and bounded like text.
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("(no JSON form: %v)", err)
	}
	return bounded(harness.Redact(string(b), secrets))
}

// bounded is s cut to maxShownText bytes at a character boundary, with
// the number of bytes left out.
func bounded(s string) string {
	if len(s) <= maxShownText {
		return s
	}
	cut := maxShownText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… [%d more bytes not shown]", s[:cut], len(s)-cut)
}

// printOutput writes a shown result under its outcome line: each member
// of a mapping on a line of its own, text as an indented block. Control
// characters other than newline and tab are escaped: a command's output
// must not drive the terminal.
func printOutput(w io.Writer, v any) {
	m, ok := v.(map[string]any)
	if !ok {
		m = map[string]any{"result": v}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch x := m[k].(type) {
		case string:
			if x == "" {
				fmt.Fprintf(w, "    %s: \"\"\n", k)
				continue
			}
			fmt.Fprintf(w, "    %s:\n", k)
			for _, line := range strings.Split(strings.TrimSuffix(x, "\n"), "\n") {
				fmt.Fprintf(w, "      %s\n", printable(line))
			}
		default:
			b, err := json.Marshal(x)
			if err != nil {
				b = []byte(fmt.Sprint(x))
			}
			fmt.Fprintf(w, "    %s: %s\n", k, printable(string(b)))
		}
	}
}

// printable escapes what is not printable text in s (bytes that are not
// UTF-8, control characters but tab) as \xNN.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1, r < 0x20 && r != '\t', r == 0x7f, r >= 0x80 && r < 0xa0:
			for _, c := range []byte(s[i : i+n]) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
