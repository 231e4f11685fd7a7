// Package sandbox runs a subprocess that the kernel holds to a Spec: Landlock
// filesystem, TCP and scope rules, no_new_privs, no capabilities, an exact
// environment, resource limits and, for network isolation, a new user and
// network namespace. Nothing in polc's own process is restricted: the
// restrictions are applied by a launcher, the dedicated program
// polc-sandbox or else a re-executed copy of the running binary
// (/proc/self/exe), that restricts itself and then execs the target.
//
// # Use
//
// Call Init first thing in main (and in TestMain of a test binary that runs
// sandboxed commands). Call Probe to learn what the running kernel can
// enforce, then Command to get an *exec.Cmd and run it as usual. Command
// refuses a Spec the system cannot enforce (the error wraps ErrUnsupported)
// instead of running it with less: nothing is silently dropped.
//
// # What each part of a Spec maps to
//
//   - Read, Write, Execute and the system paths: one Landlock "path beneath"
//     rule per path, on the file or directory the path names at spawn. A
//     Read, Write or Execute path is opened without following any symbolic
//     link (openat2 RESOLVE_NO_SYMLINKS; without openat2, one component at
//     a time with O_NOFOLLOW): a path that is or goes through a link is
//     refused (ExitRefused), since a contained process that can write above
//     a granted name could have swapped it for a link to anything. System
//     paths follow links (/bin and /lib64 are links on merged-/usr systems;
//     the target cannot write them).
//     The ruleset handles every filesystem right the kernel's ABI knows, so
//     what is not granted is denied. Read grants read_file and read_dir;
//     Execute adds execute; Write adds write_file, truncate, remove_file,
//     remove_dir, make_reg, make_dir, make_sym, make_fifo, make_sock and
//     refer. Device nodes (make_char, make_block) and device ioctls are never
//     granted. On a file, only the rights meaningful for files apply.
//   - Deny: see "Deny" below.
//   - Mounts: the launcher gives the target a private mount namespace in
//     which every mount is read-only except the write roots (see "Mounts"
//     below), so that chmod, chown, utime and extended attributes, which
//     Landlock does not restrict, fail with EROFS outside the write roots.
//   - Network: NetworkDeny and NetworkProxy start the launcher in a new user
//     namespace (uid and gid 0 inside mapped to the caller's effective ids)
//     and a new network namespace, and handle Landlock's TCP bind and connect
//     rights (plus UDP on ABI 10 and later) with no port allowed, except
//     connect to ProxyPort under NetworkProxy. Under NetworkProxy the launcher
//     brings lo up (SIOCSIFFLAGS), listens on 127.0.0.1:ProxyPort and forwards
//     each connection to ProxySocket, a unix socket outside the namespace
//     (pathname sockets are reached through the filesystem, not the network
//     namespace; the forwarder itself is not under Landlock, so this works
//     on every ABI). NetworkAllow adds no network namespace and no network
//     rule; for a caller that is not root it adds a user namespace (same
//     mapping) so that the launcher can make its private mount namespace.
//   - Forwards (NetworkDeny and NetworkProxy only): the launcher also
//     listens on 127.0.0.1:Port for each, forwards each connection to its
//     unix socket outside, and Landlock allows connect to exactly those
//     ports. A Spec with forwards runs the forwarder launcher (as
//     NetworkProxy does) even under NetworkDeny. A caller uses one to let
//     the target reach one service of its own, such as a model API relay.
//   - Signals and abstract unix sockets: always scoped (Landlock
//     LANDLOCK_SCOPE_SIGNAL and LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET): the
//     target can signal and connect only within its own sandbox. Without
//     this, a target running as root could kill any process.
//   - no_new_privs: always set (prctl PR_SET_NO_NEW_PRIVS): setuid bits and
//     file capabilities give nothing.
//   - A seccomp filter (classic BPF, installed on the launcher's thread after
//     no_new_privs, inherited by everything the target starts): with
//     Spec.KeepSession, setsid fails with EPERM, so no process leaves the
//     session its caller ends it by; io_uring_setup,
//     io_uring_enter and io_uring_register fail with EPERM (io_uring
//     operations such as IORING_OP_SOCKET and IORING_OP_CONNECT never pass
//     seccomp's argument checks); before Landlock ABI 9, which is the first to
//     check connect(2) and sendmsg(2) to a pathname unix socket, socket(AF_UNIX,
//     ...) and socketpair(AF_UNIX, SOCK_DGRAM, ...) fail with EACCES (a stream
//     or seqpacket socketpair stays allowed: it is connected at birth and can
//     reach no path; a datagram one could sendto(2) any path); under
//     NetworkDeny and NetworkProxy socket(2) of any family other than AF_UNIX,
//     AF_INET, AF_INET6 and AF_NETLINK fails with EACCES (AF_VSOCK and others
//     are not isolated by the network namespace). A syscall of another
//     architecture (the 32-bit x86 entry, x32) kills the process. Only amd64
//     and arm64 are supported; elsewhere the launcher refuses.
//   - Capabilities: the bounding, ambient, inheritable, permitted and
//     effective sets are emptied, so a target running as uid 0 holds no
//     capability (no mknod, chroot, module loading, raw sockets, ...).
//   - Env: the target's whole environment; the launcher's own environment
//     (only POLC_SANDBOX_LAUNCHER) is not passed on. A slash-free argv[0] is
//     looked up in PATH from Env, default /bin:/usr/bin.
//   - Dir: chdir before exec.
//   - Limits: setrlimit RLIMIT_CPU (soft N, hard N+1), RLIMIT_FSIZE and
//     RLIMIT_NPROC, lowered only, never raised. The kernel never enforces
//     RLIMIT_NPROC for uid 0 (the root user is exempt, capabilities or not),
//     so a Processes limit for a target that would run as host uid 0 is
//     refused; Probe reports the "rlimits" facet as degraded then.
//   - File descriptors: only stdin, stdout, stderr and ExtraFiles reach the
//     target, ExtraFiles[i] as descriptor 3+i (a nil entry stays closed),
//     as exec.Cmd.ExtraFiles would place them. A passed file is already
//     open, so the grants do not restrict reading or writing it; they do
//     restrict reopening it by a path (/proc/self/fd/N resolves to the
//     file, which must then lie under a grant). Every other descriptor,
//     including one the caller left open without close-on-exec, is closed.
//     A passed regular file, directory or memory device is reopened in the
//     target's mount namespace (see "Passed files" below): passing a file
//     grants its data, not its metadata, and a file passed for writing must
//     lie in a write root.
//
// # System paths
//
// SystemPaths lists what every sandboxed process may use besides its Spec,
// each only if it exists: /usr, /bin, /sbin, /lib, /lib32 and /lib64 (read
// and execute: programs, the dynamic loader and libraries); from /etc only
// the loader cache and configuration, passwd, group, nsswitch.conf, hosts,
// host.conf, resolv.conf, gai.conf, services, protocols, localtime and the
// CA certificate directories (to start programs, resolve names and verify
// TLS) — /etc itself is not granted, so shadow, ssh host keys and
// ssl/private stay out of reach; /dev/null (read and write), /dev/zero,
// /dev/random, /dev/urandom; and /proc (read). /proc gives no access to other
// processes' memory, environment or descriptors: Landlock refuses
// ptrace-class access to processes outside the sandbox. (Their command lines
// stay readable, as for any process.) A Deny applies to system paths too.
//
// # Deny
//
// Landlock can only grant. To keep a path beneath a granted directory
// inaccessible, the launcher grants that directory minus the denied path:
// walking from the granted root towards each denied path, it grants every
// other entry of each directory on the way separately, listing them at spawn
// (at most 4096 entries per spawn; above that it refuses rather than grant
// the root). Entries are opened without following symlinks and a symlink is
// never granted (what it points to is checked on its own when followed).
// Denied paths are resolved first, so denying a symlink denies its target.
// The consequences, reported by Probe as the "filesystem_deny" facet being
// degraded:
//
//   - Nothing can be created, removed or renamed directly in a directory on
//     the way to a denied path; its other entries keep their full rights.
//   - Such a directory cannot be listed when a denied directory lies beneath
//     it (listing would reveal the denied directory's names); it can when
//     only denied files (or absent paths) lie beneath.
//   - Entries added to such a directory by other processes after spawn are
//     inaccessible to the target.
//   - Landlock rules follow the file, not its name. A denied regular file
//     with more than one hard link is refused (the other name might be
//     granted); hard links to files inside a denied directory are not
//     searched for.
//   - A grant at or beneath a denied path is dropped: denial dominates.
//
// # Mounts
//
// Landlock does not restrict chmod, utime, extended attributes, stat or
// chdir, and a target running as uid 0 of the caller's user owns every file
// that user owns (as root: the system's files). So the exec launcher, on its
// locked thread, before anything else: unshares its mount namespace
// (CLONE_NEWNS; under NetworkDeny and NetworkProxy it already holds
// CAP_SYS_ADMIN in its own user namespace; under NetworkAllow a caller that
// is not root gets a new user namespace with the same mapping for it, and
// root needs none); makes every mount private, recursively, so that no
// change propagates to the caller's namespace; clones the mount tree of each
// write root (open_tree OPEN_TREE_CLONE|AT_RECURSIVE, the root opened with
// RESOLVE_NO_SYMLINKS) while it is still writable; makes every mount
// read-only (mount_setattr of "/" with AT_RECURSIVE and MOUNT_ATTR_RDONLY);
// and mounts each clone back on its write root (move_mount; a file on a
// file). Write roots beneath another write root or at or beneath a denied
// path get no clone of their own. Device nodes such as /dev/null stay usable
// on a read-only mount, and a link or rename between a write root and the
// rest of the tree fails with EXDEV. The target holds no capability and
// Landlock forbids mounting, so it cannot undo this. It costs about 0.3 ms
// per spawn (BenchmarkPrivateMounts). The files the caller passes are then
// reopened on these mounts (see "Passed files").
//
// # Passed files
//
// The caller opened stdin, stdout, stderr and ExtraFiles in its own mount
// namespace, on writable mounts; a descriptor (and its /proc/self/fd/N
// magic link, which resolves to the same mount, not by path) would let the
// target chmod, utime or set extended attributes on a file outside the
// write roots. So the exec launcher, after the mounts are read-only and
// before Landlock restricts it, reopens every inherited descriptor (those
// without close-on-exec below the spec pipe) that is a regular file, a
// directory (O_PATH ones included) or one of the memory devices /dev/null,
// zero, full, random and urandom (a target that is host uid 0 owns them):
// by the path /proc/self/fd/N reads, with openat2 RESOLVE_NO_SYMLINKS, the
// original's access mode and status flags (O_APPEND, O_NONBLOCK, the sync
// flags, O_DIRECT, O_NOATIME; never O_CREAT or O_TRUNC), the same device
// and inode (fstat of both), and the original's offset; then dup3 puts the
// new descriptor in the old one's place. Descriptors that shared one open
// file description (kcmp; 2>&1) share the new one. Pipes, sockets,
// terminals and other devices pass as they are: they have no path to
// reopen, or reopening them has effects of its own (/dev/ptmx makes a new
// terminal). The launcher refuses (ExitRefused) when a passed file cannot
// be reopened as it was: deleted, its path gone or naming another file or
// going through a link, or open for writing outside the write roots
// (EROFS). That is the contract: a passed file outside the write roots is
// read-only data; to let the target write a file, put it in a write root
// or pass a pipe. Under NetworkProxy the second launcher, which holds the
// mount namespace, does it.
//
// # What Landlock does not restrict
//
//   - chmod, utime, extended attributes, stat and chdir on any path. Outside
//     the write roots the read-only mounts refuse the first three (EROFS);
//     inside a write root a target can change the mode, times and extended
//     attributes of any path it owns, denied paths included (their content
//     stays out of reach), and stat and chdir work everywhere (chown needs
//     CAP_CHOWN, which it lacks). Probe reports the "filesystem" facet as
//     degraded for this.
//   - Connecting to pathname unix sockets before ABI 9. The seccomp filter
//     closes this by refusing unix sockets altogether (see above), so a
//     program that needs one (a local server on a socket in its workspace,
//     an ssh-agent client) fails under the sandbox on such a kernel. A unix
//     datagram socket the caller passes as stdin, stdout or stderr could
//     still send to a path: pass pipes or files. Also in the "filesystem"
//     facet's reason.
//   - What runs: Landlock checks execve, not mmap or what an interpreter
//     reads. The dynamic loader (a system path) runs any readable file as a
//     program, and an interpreter runs any readable script, so Execute
//     bounds which files execve accepts, not which code runs: it is no
//     boundary beyond Read and Write.
//   - Multipath TCP and, before ABI 10, UDP: not covered by Landlock's
//     network rules; the network namespace is what isolates them under
//     NetworkDeny and NetworkProxy.
//
// # Kernel features needed
//
// Landlock ABI 6 (Linux 6.12) for every Spec, since signals and abstract
// unix sockets are always scoped (ABI 6, with the signal-scoping fix, erratum
// 2; a kernel without it counts as ABI 5). The filesystem rules use ABI 1
// rights, refer (ABI 2), truncate (ABI 3) and the device ioctl right (ABI 5,
// handled, never granted); from ABI 9 connecting to pathname unix sockets is
// handled and never granted. TCP rules need ABI 4, UDP rules ABI 10. Every
// spawn needs seccomp filters with the errno and kill_process actions and
// the mount API (open_tree, move_mount, mount_setattr: Linux 5.12, implied
// by ABI 6); a caller that is not root needs user namespaces for every
// Spec (the private mount namespace), not only for NetworkDeny and
// NetworkProxy.
// NetworkDeny and NetworkProxy also need unprivileged user and network
// namespaces (Probe tries one once). Probe reports all of this.
//
// # How the launcher applies the restrictions
//
// The launcher locks its main goroutine to its OS thread, builds the ruleset
// with go-landlock's Config.NewRulesetFD (strict: never BestEffort, so a
// missing kernel feature is an error, not a silent downgrade), then on that
// thread sets the resource limits, drops capabilities, sets no_new_privs,
// calls landlock_restrict_self for that thread only, installs the seccomp
// filter on that thread only and execs the target
// from the same thread; execve gives the new program that thread's
// credentials and domain. go-landlock's all-thread Restrict (libpsx) is
// never used.
//
// Under NetworkDeny and NetworkAllow the launcher becomes the target (same
// pid): the caller sees the target's own wait status. Under NetworkProxy the
// launcher stays as the forwarder and runs a second launcher (which applies
// everything and execs the target) as its child, with Pdeathsig SIGKILL so
// that the target dies when the forwarder is killed. It forwards SIGTERM,
// SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT and SIGALRM
// to the child and exits as the child did: with its exit code, or by
// raising the same signal on itself (128+signal only if that fails). A
// caller that kills the process group reaches both.
//
// # Which launcher
//
// When a file named polc-sandbox (LauncherFile; built from cmd/polc-sandbox)
// lies in the directory of the running executable (os.Executable), Command
// starts it as the launcher; otherwise it re-executes the running binary
// through /proc/self/exe. The dedicated launcher links only this package
// and its dependencies (the standard library, x/sys, go-landlock), so it
// starts far faster than polc, whose package init functions (CUE, OPA)
// alone take tens of milliseconds. It is
// trusted only if no one but root and the current user can have placed or
// changed it: a regular file, not a symlink, with an execute bit, owned by
// root or the effective user and writable by neither group nor others, in a
// directory owned by root or the effective user that group and others
// cannot write to (or that is sticky). A polc-sandbox that is present but
// fails these checks is not silently replaced by /proc/self/exe: Command
// refuses (ErrUnsupported) and Probe reports every facet unsupported, naming
// the file and the failed check, because such a file means a broken or
// tampered installation. The choice is made once per process; UseLauncher
// sets another launcher (after the same checks) or, with "", the running
// binary, for tests, benchmarks and programs that install the launcher
// elsewhere. Report.Launcher says which one is used. The launcher and the
// running binary must come from the same build: a launcher that speaks
// another protocol version refuses every spec (ExitRefused).
//
// # Launcher protocol
//
// Command starts the launcher with argv ["polc-sandbox"], the environment
// POLC_SANDBOX_LAUNCHER=<role> (exec or proxy) and POLC_SANDBOX_SPEC_FD=<N>
// and nothing else, Spec.ExtraFiles as descriptors 3 to N-1 and the read
// end of a pipe as descriptor N (so N is 3 without ExtraFiles; at most
// 1003, written in plain decimal, anything else is refused). The pipe holds
// one JSON object, at most 1 MiB, then EOF:
//
//	{"version":2, "argv":[...], "env":[...], "dir":"", "read":[...],
//	 "write":[...], "execute":[...], "deny":[...], "network":"deny",
//	 "proxy_socket":"", "proxy_port":0, "forwards":[{"port":0,"socket":""}],
//	 "limits":{"cpu_seconds":0, "file_size_bytes":0, "processes":0},
//	 "keep_session":false,
//	 "host_net_ns":{"dev":0,"ino":0}, "host_user_ns":{"dev":0,"ino":0}}
//
// The parser is strict: an unknown or duplicated field, trailing data, a
// version other than 2 or an invalid value (a relative or unclean path, an
// environment entry without a name, a proxy field outside NetworkProxy, ...)
// make the launcher refuse. host_net_ns and host_user_ns name the caller's
// namespaces; under NetworkDeny and NetworkProxy the launcher refuses when it
// is still in either of them (for example because the caller replaced
// Cmd.SysProcAttr instead of setting fields in it). The spec never travels in
// the target's environment or argv.
//
// The exec launcher closes the pipe after reading it, reopens the passed
// files (see "Passed files") and, just before execve, marks descriptor N
// and every one above it close-on-exec; descriptors 3 to N-1 pass at their
// numbers (Go's fork left a nil entry closed, and every descriptor the
// launcher opened itself is close-on-exec). The proxy launcher takes descriptors 3 to N-1 that lack
// close-on-exec (exactly the inherited ones) before it opens any of its
// own, passes them to its child launcher at the same numbers with a new
// spec pipe at N, and closes its copies as soon as the child has started.
//
// # Exit statuses
//
// The target's own status passes through. When the target never ran the
// launcher writes one line "polc sandbox: <what>: <why>" to stderr and exits
// with ExitRefused (125: invalid spec, a passed file that cannot be
// reopened as it was, or a restriction could not be applied),
// ExitCannotExec (126: execve failed, for example Landlock denied executing
// the program) or ExitNotFound (127: argv[0] not found).
//
// # Cost
//
// Each spawn starts the launcher once (twice under NetworkProxy), so its
// cost is dominated by the launcher binary's start-up, package init
// functions included (hence the dedicated launcher), plus namespace
// creation for NetworkDeny and NetworkProxy. The launcher's own work
// (reading the spec, building the ruleset, restricting) is well under a
// millisecond; BenchmarkLauncherWork measures it in-process,
// BenchmarkSpawn the whole spawn per launcher and network mode, and
// bench/spawn.sh prints them side by side. A launcher built without cgo
// (CGO_ENABLED=0) is statically linked and skips the dynamic loader: the
// package's net import links the C resolver otherwise.
package sandbox
