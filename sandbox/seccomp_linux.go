//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter closes what Landlock cannot: before ABI 9 Landlock does
// not check connect(2) or sendmsg(2) to a pathname unix socket, so a target
// (uid 0 of polc's user) could reach any socket it can name: another call's
// egress proxy, `polc serve`'s API socket, any daemon's. io_uring operations
// (IORING_OP_SOCKET, IORING_OP_CONNECT, ...) run without passing seccomp's
// argument checks, so io_uring is refused outright.

// unixSocketsFiltered reports whether the filter refuses unix sockets for a
// kernel with Landlock ABI abi: from ABI 9 Landlock itself refuses
// connecting and sending to pathname sockets made outside the sandbox.
func unixSocketsFiltered(abi int) bool { return abi < 9 }

// seccompArch is the audit architecture of the running binary's syscalls.
// Syscalls of any other architecture (the 32-bit x86 entry, x32) kill the
// process: their numbers differ and the filter would not recognize them.
func seccompArch() (arch uint32, x32 bool, err error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, false, nil
	}
	return 0, false, fmt.Errorf("seccomp filter: architecture %s is not supported (amd64 and arm64 are)", runtime.GOARCH)
}

// Offsets in struct seccomp_data; args are 64-bit little-endian, and the
// kernel reads socket(2)'s int arguments from their low 32 bits.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24

	x32SyscallBit = 0x40000000
	sockTypeMask  = 0xf
)

// bpfProg is a tiny assembler for classic BPF with symbolic jump targets.
type bpfProg struct {
	insns  []unix.SockFilter
	jumps  map[int][2]string // instruction index -> true, false labels
	labels map[string]int
}

func (p *bpfProg) label(name string) { p.labels[name] = len(p.insns) }

func (p *bpfProg) stmt(code uint16, k uint32) {
	p.insns = append(p.insns, unix.SockFilter{Code: code, K: k})
}

// jump adds a conditional jump; an empty label means the next instruction.
func (p *bpfProg) jump(code uint16, k uint32, jt, jf string) {
	p.jumps[len(p.insns)] = [2]string{jt, jf}
	p.stmt(unix.BPF_JMP|code|unix.BPF_K, k)
}

func (p *bpfProg) assemble() ([]unix.SockFilter, error) {
	for i, l := range p.jumps {
		for j, name := range l {
			if name == "" {
				continue
			}
			at, ok := p.labels[name]
			if !ok {
				return nil, fmt.Errorf("seccomp filter: no label %q", name)
			}
			off := at - i - 1
			if off < 0 || off > 255 {
				return nil, fmt.Errorf("seccomp filter: jump to %q out of range", name)
			}
			if j == 0 {
				p.insns[i].Jt = uint8(off)
			} else {
				p.insns[i].Jf = uint8(off)
			}
		}
	}
	return p.insns, nil
}

// seccompFilter builds the filter for a spec's network mode on a kernel
// with Landlock ABI abi:
//
//   - a syscall of another architecture, or an x32 syscall: kill the process;
//   - io_uring_setup, io_uring_enter, io_uring_register: EPERM (what a kernel
//     with io_uring disabled answers, so programs fall back to plain syscalls);
//   - keepSession (Spec.KeepSession): setsid: EPERM, so that no process
//     leaves the session its call is ended by;
//   - ABI < 9: socket(AF_UNIX, ...) and socketpair(AF_UNIX, SOCK_DGRAM, ...):
//     EACCES. A stream or seqpacket socketpair stays allowed: it is connected
//     at birth, connect(2) on it fails with EISCONN and sendmsg(2) ignores or
//     refuses an address, so it can reach no path. A datagram one could send
//     to any path with sendto(2);
//   - NetworkDeny and NetworkProxy: socket(2) of a family other than AF_UNIX,
//     AF_INET, AF_INET6 and AF_NETLINK: EACCES. The network namespace
//     isolates those four; others, AF_VSOCK first, are not (or not always)
//     per network namespace and would reach past it (a virtual machine's
//     host over vsock).
func seccompFilter(network Network, abi int, keepSession bool) ([]unix.SockFilter, error) {
	arch, x32, err := seccompArch()
	if err != nil {
		return nil, err
	}
	p := &bpfProg{jumps: map[int][2]string{}, labels: map[string]int{}}
	ld := func(off uint32) { p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }
	ret := func(v uint32) { p.stmt(unix.BPF_RET|unix.BPF_K, v) }
	blockUnix := unixSocketsFiltered(abi)
	filterFamilies := network != NetworkAllow

	ld(offArch)
	p.jump(unix.BPF_JEQ, arch, "", "kill")
	ld(offNr)
	if x32 {
		p.jump(unix.BPF_JGE, x32SyscallBit, "kill", "")
	}
	p.jump(unix.BPF_JEQ, unix.SYS_IO_URING_SETUP, "eperm", "")
	p.jump(unix.BPF_JEQ, unix.SYS_IO_URING_ENTER, "eperm", "")
	p.jump(unix.BPF_JEQ, unix.SYS_IO_URING_REGISTER, "eperm", "")
	if keepSession {
		p.jump(unix.BPF_JEQ, unix.SYS_SETSID, "eperm", "")
	}
	if blockUnix || filterFamilies {
		p.jump(unix.BPF_JEQ, unix.SYS_SOCKET, "socket", "")
	}
	if blockUnix {
		p.jump(unix.BPF_JEQ, unix.SYS_SOCKETPAIR, "socketpair", "")
	}
	ret(unix.SECCOMP_RET_ALLOW)

	if blockUnix || filterFamilies {
		p.label("socket")
		ld(offArg0)
		if blockUnix {
			p.jump(unix.BPF_JEQ, unix.AF_UNIX, "eacces", "")
		}
		if filterFamilies {
			for _, af := range []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK} {
				p.jump(unix.BPF_JEQ, af, "allow", "")
			}
			ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES))
		}
		ret(unix.SECCOMP_RET_ALLOW)
	}
	if blockUnix {
		p.label("socketpair")
		ld(offArg0)
		p.jump(unix.BPF_JEQ, unix.AF_UNIX, "", "allow")
		ld(offArg1)
		p.stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, sockTypeMask)
		p.jump(unix.BPF_JEQ, unix.SOCK_DGRAM, "eacces", "allow")
	}
	p.label("allow")
	ret(unix.SECCOMP_RET_ALLOW)
	p.label("eacces")
	ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES))
	p.label("eperm")
	ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	p.label("kill")
	ret(unix.SECCOMP_RET_KILL_PROCESS)
	return p.assemble()
}

// installSeccomp installs the filter on the calling thread only (no TSYNC):
// the launcher execs the target from this thread right after, and the
// filter stays with the target and everything it starts. no_new_privs must
// be set already.
func installSeccomp(network Network, abi int, keepSession bool) error {
	insns, err := seccompFilter(network, abi, keepSession)
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(insns)), Filter: &insns[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(insns)
	if errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}

// probeSeccomp reports whether the kernel can run the filter: seccomp
// filters with the errno and kill_process actions, and a known architecture.
func probeSeccomp() error {
	if _, _, err := seccompArch(); err != nil {
		return err
	}
	b, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	if err != nil {
		return fmt.Errorf("seccomp filters unavailable: %w", err)
	}
	have := strings.Fields(string(b))
	for _, a := range []string{"errno", "kill_process", "allow"} {
		if !slices.Contains(have, a) {
			return errors.New("seccomp filters lack the " + a + " action")
		}
	}
	return nil
}
