package sandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"polc.dev/polc/sandbox"
)

func TestSmoke(t *testing.T) {
	r := sandbox.Probe()
	b, _ := json.MarshalIndent(r, "", " ")
	t.Logf("%s", b)
	ws := t.TempDir()
	for _, n := range []sandbox.Network{sandbox.NetworkAllow, sandbox.NetworkDeny, sandbox.NetworkProxy} {
		spec := sandbox.Spec{Write: []string{ws}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: ws, Network: n}
		if n == sandbox.NetworkProxy {
			spec.ProxySocket = ws + "/p.sock"
			spec.ProxyPort = 3128
		}
		cmd, err := sandbox.Command(context.Background(), spec, []string{"bash", "-c", "echo hi; id; cat /proc/self/status | grep -E 'Cap|NoNew|Sig'; env; ls /; python3 -c 'print(1)'; cat <(echo procsub); echo x > /dev/null && echo devnull-ok"})
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err = cmd.Run()
		t.Logf("%v: err=%v\nstdout:\n%s\nstderr:\n%s", n, err, out.String(), errb.String())
	}
}
