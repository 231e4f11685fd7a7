//go:build linux

package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"polc.dev/polc/sandbox"
)

// 16 sandboxed commands at once, each with its own workspace, denied path,
// network mode and environment: each is held to its own spec, not to a
// neighbour's.
func TestConcurrentSpecs(t *testing.T) {
	const n = 16
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := make([]string, n)
	for i := range n {
		ws[i] = filepath.Join(root, fmt.Sprintf("ws%02d", i))
		mustMkdir(t, filepath.Join(ws[i], "secrets"))
		mustMkdir(t, filepath.Join(ws[i], "out"))
		mustWrite(t, filepath.Join(ws[i], "secrets", "key"), fmt.Sprintf("key%02d", i))
	}
	proxySock := filepath.Join(root, "proxy.sock")
	serveUnix(t, proxySock, "pong")

	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			next := ws[(i+1)%n]
			spec := sandbox.Spec{
				Write:   []string{ws[i]},
				Deny:    []string{filepath.Join(ws[i], "secrets")},
				Network: allNetworks[i%3],
				Env:     append([]string{fmt.Sprintf("ME=%02d", i)}, baseEnv...),
				Dir:     ws[i],
			}
			net := "echo no-proxy"
			if spec.Network == sandbox.NetworkProxy {
				spec.ProxySocket, spec.ProxyPort = proxySock, 3000+i
				net = fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo ping >&3 && read -r l <&3 && echo $l", spec.ProxyPort)
			}
			script := fmt.Sprintf(`echo $ME > out/mine
echo x > %[1]s/out/theirs 2>/dev/null && echo wrote-neighbour
cat %[1]s/secrets/key 2>/dev/null && echo read-neighbour-secret
cat secrets/key 2>/dev/null && echo read-own-secret
%[2]s`, next, net)
			ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
			defer cancel()
			cmd, err := sandbox.Command(ctx, spec, sh(script))
			if err != nil {
				t.Errorf("%d: %v", i, err)
				return
			}
			r := wait(cmd)
			want := "no-proxy\n"
			if spec.Network == sandbox.NetworkProxy {
				want = "pong\n"
			}
			if r.code != 0 || r.stdout != want {
				t.Errorf("%d (%s): %v", i, spec.Network, r)
			}
			if b, err := os.ReadFile(filepath.Join(ws[i], "out", "mine")); err != nil || strings.TrimSpace(string(b)) != fmt.Sprintf("%02d", i) {
				t.Errorf("%d: own write: %q %v", i, b, err)
			}
		})
	}
	wg.Wait()
	for i := range n {
		if exists(filepath.Join(ws[i], "out", "theirs")) {
			t.Errorf("ws%02d/out/theirs was written by a neighbour", i)
		}
	}
}
