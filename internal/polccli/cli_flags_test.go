package polccli

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestEveryFlagIsDocumented walks every polc command's help and checks
// that docs/cli.md names each long flag, and that a shorthand letter
// stands for one long flag across all commands (one flag style, one
// meaning per name).
func TestEveryFlagIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	help := func(path []string) string {
		var stdout, stderr bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: t.TempDir()}
		Run(context.Background(), append(append([]string{}, path...), "--help"), e)
		return stdout.String() + stderr.String()
	}
	flagRE := regexp.MustCompile(`(?m)^\s+(?:-([a-zA-Z]), )?--([a-z0-9-]+)`)
	cmdRE := regexp.MustCompile(`(?m)^  ([a-z][a-z0-9-]*)\s{2,}\S`)
	short := map[string]map[string][]string{} // letter → long → commands
	seen := 0
	var walk func(path []string)
	walk = func(path []string) {
		out := help(path)
		if i := strings.Index(out, "Flags:"); i >= 0 {
			for _, m := range flagRE.FindAllStringSubmatch(out[i:], -1) {
				long := m[2]
				if long == "help" {
					continue
				}
				seen++
				if !bytes.Contains(doc, []byte("`--"+long+"`")) {
					t.Errorf("polc %s --%s: not in docs/cli.md", strings.Join(path, " "), long)
				}
				if m[1] != "" {
					if short[m[1]] == nil {
						short[m[1]] = map[string][]string{}
					}
					short[m[1]][long] = append(short[m[1]][long], strings.Join(path, " "))
				}
			}
		}
		i := strings.Index(out, "Available Commands:")
		if i < 0 {
			return
		}
		end := strings.Index(out[i:], "\n\n")
		if end < 0 {
			end = len(out) - i
		}
		for _, m := range cmdRE.FindAllStringSubmatch(out[i:i+end], -1) {
			if m[1] == "help" || m[1] == "completion" {
				continue
			}
			walk(append(append([]string{}, path...), m[1]))
		}
	}
	walk(nil)
	if seen < 40 {
		t.Fatalf("found only %d flags in the help: the walk is broken", seen)
	}
	for letter, longs := range short {
		if len(longs) > 1 {
			var names []string
			for l, cmds := range longs {
				names = append(names, "--"+l+" ("+strings.Join(cmds, ", ")+")")
			}
			sort.Strings(names)
			t.Errorf("-%s stands for %s", letter, strings.Join(names, " and "))
		}
	}
}
