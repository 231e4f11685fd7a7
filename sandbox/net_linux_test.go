//go:build linux

package sandbox_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"polc.dev/polc/sandbox"
)

// serveTCP accepts on a loopback port of the host and counts connections.
func serveTCP(t *testing.T) (int, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, &n
}

// serveUnix answers every line received on the unix socket with reply.
func serveUnix(t *testing.T, path, reply string) *atomic.Int64 {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(childTimeout))
				if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					fmt.Fprintln(c, reply)
				}
			}()
		}
	}()
	return &n
}

// settle gives a connection that was (wrongly) made time to be counted.
func settle() { time.Sleep(200 * time.Millisecond) }

func TestNetworkTCP(t *testing.T) {
	f := newFixture(t)
	port, accepted := serveTCP(t)
	script := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected", port)

	ok(t, "direct", direct(t, f.ws, sh(script)...))
	settle()
	if accepted.Load() != 1 {
		t.Fatalf("direct: server saw %d connections", accepted.Load())
	}
	r := run(t, f.spec(sandbox.NetworkAllow), sh(script)...)
	ok(t, "allow", r)
	settle()
	if accepted.Load() != 2 {
		t.Fatalf("allow: server saw %d connections", accepted.Load())
	}
	for _, n := range []sandbox.Network{sandbox.NetworkDeny, sandbox.NetworkProxy} {
		r := run(t, withProxy(t, f.spec(n)), sh(script)...)
		// Landlock refuses the connect before the (isolated) network could.
		denied(t, n.String(), r)
		settle()
		if accepted.Load() != 2 {
			t.Errorf("%s: the host server saw a connection", n)
		}
	}
}

func TestNetworkProxyReachesSocket(t *testing.T) {
	f := newFixture(t)
	sock := f.outside + "/proxy.sock"
	conns := serveUnix(t, sock, "pong")
	spec := f.spec(sandbox.NetworkProxy)
	spec.ProxySocket, spec.ProxyPort = sock, 3128
	script := "exec 3<>/dev/tcp/127.0.0.1/3128 && echo ping >&3 && read -r line <&3 && echo $line"
	r := run(t, spec, sh(script)...)
	ok(t, "proxy", r)
	if r.stdout != "pong\n" || conns.Load() != 1 {
		t.Fatalf("proxy: stdout %q, %d connections at the socket", r.stdout, conns.Load())
	}
	// Two connections in one run, and the port is the only one.
	r = run(t, spec, sh(script+" && exec 4<>/dev/tcp/127.0.0.1/3128 && echo ping >&4 && read -r l2 <&4 && echo $l2; exec 5<>/dev/tcp/127.0.0.1/3129")...)
	if r.stdout != "pong\npong\n" || !strings.Contains(r.stderr, "Permission denied") {
		t.Fatalf("proxy, second run:\n%v", r)
	}
	if conns.Load() != 3 {
		t.Errorf("%d connections at the socket, want 3", conns.Load())
	}
}

func TestNetworkUDP(t *testing.T) {
	f := newFixture(t)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	port := pc.LocalAddr().(*net.UDPAddr).Port
	arrived := func() bool {
		pc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		buf := make([]byte, 64)
		n, _, err := pc.ReadFrom(buf)
		return err == nil && string(buf[:n]) == "datagram\n"
	}
	script := fmt.Sprintf("echo datagram > /dev/udp/127.0.0.1/%d", port)
	direct(t, f.ws, sh(script)...)
	if !arrived() {
		t.Fatal("direct: the datagram did not arrive")
	}
	run(t, f.spec(sandbox.NetworkAllow), sh(script)...)
	if !arrived() {
		t.Fatal("allow: the datagram did not arrive")
	}
	for _, n := range []sandbox.Network{sandbox.NetworkDeny, sandbox.NetworkProxy} {
		// "ran": the target ran (the launcher did not refuse), the datagram
		// just went nowhere.
		if r := run(t, withProxy(t, f.spec(n)), sh(script+"; echo ran")...); r.stdout != "ran\n" {
			t.Errorf("%s: %v", n, r)
		}
		if arrived() {
			t.Errorf("%s: the datagram arrived", n)
		}
	}
}

func TestAbstractUnixSocketScoped(t *testing.T) {
	f := newFixture(t)
	name := fmt.Sprintf("@polc-sandbox-test-%d", os.Getpid())
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	script := fmt.Sprintf(`python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("\0%s"); print("connected")'`, name[1:])
	ok(t, "direct", direct(t, f.ws, sh(script)...))
	r := run(t, f.spec(sandbox.NetworkAllow), sh(script)...)
	if r.code == 0 || !strings.Contains(r.stderr, "PermissionError") {
		t.Fatalf("allow: connected to an abstract socket outside the sandbox:\n%v", r)
	}
}

// TestNetworkForwards: under NetworkDeny and NetworkProxy each forwarded
// port reaches its own unix socket, and only the forwarded ports (and the
// proxy port) are reachable; under NetworkAllow forwards are refused.
func TestNetworkForwards(t *testing.T) {
	f := newFixture(t)
	sockA, sockB := f.outside+"/a.sock", f.outside+"/b.sock"
	connsA, connsB := serveUnix(t, sockA, "from-a"), serveUnix(t, sockB, "from-b")
	talk := func(port int, fd int) string {
		return fmt.Sprintf("exec %[2]d<>/dev/tcp/127.0.0.1/%[1]d && echo ping >&%[2]d && read -r l <&%[2]d && echo $l", port, fd)
	}
	script := talk(4100, 3) + " && " + talk(4101, 4) + "; exec 5<>/dev/tcp/127.0.0.1/4102"
	for i, n := range []sandbox.Network{sandbox.NetworkDeny, sandbox.NetworkProxy} {
		spec := withProxy(t, f.spec(n))
		spec.Forwards = []sandbox.Forward{{Port: 4100, Socket: sockA}, {Port: 4101, Socket: sockB}}
		r := run(t, spec, sh(script)...)
		if r.stdout != "from-a\nfrom-b\n" || !strings.Contains(r.stderr, "Permission denied") {
			t.Fatalf("%s:\n%v", n, r)
		}
		if connsA.Load() != int64(i+1) || connsB.Load() != int64(i+1) {
			t.Errorf("%s: %d and %d connections at the sockets", n, connsA.Load(), connsB.Load())
		}
	}
	spec := f.spec(sandbox.NetworkAllow)
	spec.Env = baseEnv
	spec.Forwards = []sandbox.Forward{{Port: 4100, Socket: sockA}}
	if _, err := sandbox.Command(t.Context(), spec, sh("true")); err == nil || !strings.Contains(err.Error(), "forwards are only") {
		t.Errorf("allow with forwards: %v", err)
	}
	spec = withProxy(t, f.spec(sandbox.NetworkProxy))
	spec.Env = baseEnv
	spec.Forwards = []sandbox.Forward{{Port: spec.ProxyPort, Socket: sockA}}
	if _, err := sandbox.Command(t.Context(), spec, sh("true")); err == nil || !strings.Contains(err.Error(), "forwarded twice") {
		t.Errorf("forward on the proxy port: %v", err)
	}
}
