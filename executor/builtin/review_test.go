package builtin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestReviewBashRunsNoHiddenCommand: with shell control the bash callable
// runs the text through bash, which evaluates a quoted subscript in an
// arithmetic test and runs its command substitution ("touch pwned"), a
// command the policy never saw. The callable re-parses the command as the
// normalizer does, so it refuses the text (invalid_command) and nothing
// runs.
func TestReviewBashRunsNoHiddenCommand(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	ws := t.TempDir()
	fns := callables(t, ws)
	for i, cmd := range []string{
		`[[ 'a[$(touch pwned0)]' -eq 0 ]]`,
		`for x in 'a[$(touch pwned1)]'; do echo $((x)); done`,
		`echo; read 'a[$(touch pwned2)]' <<< x`,
	} {
		_, err := fns["bash"](context.Background(), map[string]any{"command": cmd})
		if _, serr := os.Stat(filepath.Join(ws, "pwned"+string(rune('0'+i)))); serr == nil {
			t.Errorf("%q ran a hidden command", cmd)
		}
		if class(err) != "invalid_command" {
			t.Errorf("%q: %v, want invalid_command", cmd, err)
		}
	}
}

// TestReviewHTTPGetDialsOnlyTheJudgedHost: net/http dials "127。0。0。1"
// (ideographic full stops) as 127.0.0.1 after IDNA mapping, so a URL the
// policy judged as another host reached a loopback server. The callable
// refuses what the normalizer refuses (invalid_url) and sends nothing.
func TestReviewHTTPGetDialsOnlyTheJudgedHost(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	fns := callables(t, t.TempDir())
	for _, host := range []string{"127。0。0。1", "１２７.０.０.１"} {
		_, err := fns["http_get"](context.Background(), map[string]any{"url": "http://" + host + ":" + port + "/"})
		if class(err) != "invalid_url" {
			t.Errorf("%s: %v, want invalid_url", host, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the server was reached %d times", n)
	}
	if _, err := fns["http_get"](context.Background(), map[string]any{"url": srv.URL + "/"}); err != nil || hits.Load() != 1 {
		t.Errorf("the judged host: %v, %d hits", err, hits.Load())
	}
}
