//go:build linux

package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/sandbox"
)

// privateSocket serves "pong" on a 0600 root-owned unix socket in a 0700
// directory outside every grant, as polc serve's API socket or another
// call's egress proxy socket would be.
func privateSocket(t *testing.T, f fixture) string {
	t.Helper()
	dir := filepath.Join(f.outside, "private")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	serveUnix(t, sock, "pong")
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}
	return sock
}

// A contained process (uid 0 of the socket's owner) cannot reach a
// pathname unix socket made outside its sandbox, whatever the network mode
// and whatever the program: before Landlock ABI 9 the launcher's seccomp
// filter refuses creating the socket, from ABI 9 Landlock refuses the
// connect.
func TestPathnameUnixSocketRefused(t *testing.T) {
	f := newFixture(t)
	sock := privateSocket(t, f)
	clients := map[string]string{
		"python3": fmt.Sprintf(`python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("%s"); s.sendall(b"ping\n"); print(s.recv(100).decode().strip())'`, sock),
		"socat":   fmt.Sprintf(`echo ping | socat -t5 - UNIX-CONNECT:%s`, sock),
		// A datagram socketpair needs no socket(2) but could send to any path.
		"dgram socketpair": fmt.Sprintf(`python3 -c 'import socket; a,b=socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b"ping\n", "%s"); print("sent")'`, sock),
	}
	for name, script := range clients {
		t.Run(name, func(t *testing.T) {
			if name == "dgram socketpair" {
				// The server is a stream socket, so even a direct send fails
				// (wrong type); what counts is that the sandbox refuses the
				// socketpair itself, before any address is tried.
				if sandbox.Probe().LandlockABI >= 9 {
					t.Skip("Landlock checks sendmsg by path from ABI 9; no filter")
				}
				r := run(t, f.spec(sandbox.NetworkAllow), sh(script)...)
				if r.code == 0 || !strings.Contains(r.stderr, "socketpair") || !strings.Contains(r.stderr, "PermissionError") {
					t.Fatalf("a datagram socketpair was made:\n%v", r)
				}
				return
			}
			d := direct(t, f.ws, sh(script)...)
			if d.code != 0 || !strings.Contains(d.stdout, "pong") {
				t.Fatalf("direct: the control did not reach the socket:\n%v", d)
			}
			for _, n := range allNetworks {
				r := run(t, withProxy(t, f.spec(n)), sh(script)...)
				if r.code == 0 || strings.Contains(r.stdout, "pong") {
					t.Errorf("%s: reached a 0600 root socket outside the sandbox:\n%v", n, r)
				}
				denied(t, n.String(), r)
			}
		})
	}
}

// What the filter leaves: a stream socketpair (python's multiprocessing
// Pipe, subprocess plumbing) works, and so do TCP sockets.
func TestSocketpairWorks(t *testing.T) {
	f := newFixture(t)
	script := `python3 -c 'from multiprocessing import Pipe; a, b = Pipe(); a.send("over-the-pipe"); print(b.recv())'`
	for _, n := range allNetworks {
		r := run(t, withProxy(t, f.spec(n)), sh(script)...)
		ok(t, n.String(), r)
		if r.stdout != "over-the-pipe\n" {
			t.Errorf("%s: %q", n, r.stdout)
		}
	}
	r := run(t, f.spec(sandbox.NetworkDeny), sh(`python3 -c 'import socket; socket.socket(socket.AF_INET); socket.socket(socket.AF_INET6); print("inet")'`)...)
	ok(t, "inet sockets", r)
}

// io_uring is refused (its operations bypass the filter's argument
// checks), and under a network-isolating mode so are address families the
// network namespace does not isolate (AF_VSOCK reaches a virtual machine's
// host).
func TestSyscallFilter(t *testing.T) {
	f := newFixture(t)
	uring := `python3 -c '
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
r = libc.syscall(425, 4, params)
print("io_uring_setup", r, errno.errorcode.get(ctypes.get_errno()))'`
	d := direct(t, f.ws, sh(uring)...)
	if !strings.Contains(d.stdout, "io_uring_setup 3") && !strings.Contains(d.stdout, "io_uring_setup 4") {
		t.Logf("direct io_uring_setup: %v", d)
	}
	for _, n := range allNetworks {
		r := run(t, withProxy(t, f.spec(n)), sh(uring)...)
		ok(t, n.String(), r)
		if r.stdout != "io_uring_setup -1 EPERM\n" {
			t.Errorf("%s: io_uring_setup was not refused: %q", n, r.stdout)
		}
	}
	vsock := `python3 -c 'import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); print("vsock")'`
	if d := direct(t, f.ws, sh(vsock)...); d.code != 0 {
		t.Logf("no vsock here, the family check is tested on its error only: %v", d)
	}
	for _, n := range []sandbox.Network{sandbox.NetworkDeny, sandbox.NetworkProxy} {
		denied(t, n.String()+" vsock", run(t, withProxy(t, f.spec(n)), sh(vsock)...))
	}
}
