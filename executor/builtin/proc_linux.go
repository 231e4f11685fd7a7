//go:build linux

package builtin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// isolate makes cmd start a session of its own. A session, not only a
// process group: bash with "set -m" puts each job in a group of its own,
// but in its session still.
func isolate(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
}

// waitCommand waits for cmd, started by startCommand, and ends its
// session: when the main process has exited (or at once when ctx is
// done, killing its group first), the processes left in the session get
// backgroundGrace to end on their own (none when ctx is done), then each
// one left is killed, and waitCommand returns once they are gone (or
// killWait passed) and cmd.Wait has reaped the main process and read its
// output. The main process is reaped last: until then it is a zombie
// whose pid, the session's id, no other process can take, so the
// processes found in that session are the command's.
func waitCommand(ctx context.Context, cmd *exec.Cmd) (ended, error) {
	sid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		awaitExit(sid)
		close(exited)
	}()
	select {
	case <-exited:
	case <-ctx.Done():
		syscall.Kill(-sid, syscall.SIGKILL)
		<-exited
	}
	if ctx.Err() == nil {
		settle(ctx, sid)
	}
	e := endSession(sid)
	return e, cmd.Wait()
}

// awaitExit returns when the child pid has exited, without reaping it
// (WNOWAIT: cmd.Wait does).
func awaitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// settle waits up to backgroundGrace (or until ctx is done) for the
// session sid to have no running process.
func settle(ctx context.Context, sid int) {
	deadline := time.Now().Add(backgroundGrace)
	for d := time.Millisecond; ; d = min(2*d, 20*time.Millisecond) {
		live, err := sessionMembers(sid)
		if err != nil || len(live) == 0 || time.Now().After(deadline) {
			return
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// endSession kills every running process of the session sid, again as
// long as any is found (one may have forked meanwhile), until none is
// left or killWait has passed, and counts them. Without /proc only the
// session's first process group (the one the command started in) is
// killed, and none is counted.
func endSession(sid int) ended {
	seen := map[int]bool{}
	live, err := sessionMembers(sid)
	// A signal to a group reaches a process forked while it is sent; the
	// group keeps the session's id while any of it runs.
	syscall.Kill(-sid, syscall.SIGKILL)
	deadline := time.Now().Add(killWait)
	for d := time.Millisecond; err == nil && len(live) > 0; d = min(2*d, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			return ended{killed: len(seen), survived: len(live)}
		}
		for _, pid := range live {
			seen[pid] = true
			killMember(pid, sid)
		}
		time.Sleep(d)
		live, err = sessionMembers(sid)
	}
	return ended{killed: len(seen)}
}

// killMember sends SIGKILL to the process pid if it is still in the
// session sid. The process is held by a pidfd while its session is read
// and the signal sent: its pid cannot be another process's meanwhile.
func killMember(pid, sid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // gone
	}
	if err != nil {
		// No pidfd (before Linux 5.3, or out of descriptors): the pid
		// was read a moment ago, and may have come round to another
		// process only if this one ended and thousands were made since.
		syscall.Kill(pid, syscall.SIGKILL)
		return
	}
	defer unix.Close(fd)
	if _, s, _, ok := procStat(pid); ok && s == sid {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// sessionMembers lists the processes of the session sid that run
// something: not zombies, which run nothing. The state /proc/PID/stat
// shows is the main thread's: a process whose main thread has exited
// (pthread_exit) shows Z while its other threads run, so a Z process is
// a member still when one of its threads is not a zombie.
func sessionMembers(sid int) ([]int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	var live []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		if _, s, state, ok := procStat(pid); ok && s == sid && (!dead(state) || threadRuns(pid)) {
			live = append(live, pid)
		}
	}
	if len(names) == 0 {
		return nil, errors.New("/proc lists no process")
	}
	return live, nil
}

// dead reports whether a /proc state is a zombie's or a dead task's.
func dead(state byte) bool { return state == 'Z' || state == 'X' }

// threadRuns reports whether a thread of the process pid is not dead,
// or whether its threads cannot be read (the process then counts as
// running: fail closed; a gone process is not found again).
func threadRuns(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	d, err := os.Open(dir)
	if err != nil {
		_, _, _, there := procStat(pid)
		return there
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return true
	}
	for _, name := range names {
		if _, _, state, ok := statFile(dir + name + "/stat"); ok && !dead(state) {
			return true
		}
	}
	return false
}

// procStat reads the parent, session and state of the process pid from
// /proc/PID/stat: "PID (COMM) STATE PPID PGRP SESSION …", COMM any bytes
// (so the fields are after its last ')').
func procStat(pid int) (ppid, session int, state byte, ok bool) {
	return statFile("/proc/" + strconv.Itoa(pid) + "/stat")
}

// statFile reads a /proc/…/stat file (procStat).
func statFile(name string) (ppid, session int, state byte, ok bool) {
	f, err := os.Open(name)
	if err != nil {
		return 0, 0, 0, false
	}
	var buf [512]byte
	n, _ := f.Read(buf[:])
	f.Close()
	b := buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 4 || len(fields[0]) != 1 {
		return 0, 0, 0, false
	}
	pp, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return 0, 0, 0, false
	}
	s, err := strconv.Atoi(string(fields[3]))
	if err != nil {
		return 0, 0, 0, false
	}
	return pp, s, fields[0][0], true
}

// outputWriters looks for the processes that hold a write end of o's
// pipes, through /proc/PID/fd (a pipe's link reads "pipe:[INODE]") and
// the access mode in /proc/PID/fdinfo. foreign is true when one of them
// is not a child of polc's own that has not yet exec'd (polc's
// executable, polc its parent): such a child is another call's command
// between its fork and its exec, holding copies of polc's descriptors,
// which close at the exec.
func outputWriters(o *output, deadline time.Time) (foreign bool, err error) {
	self := os.Getpid()
	selfExe, err := os.Stat("/proc/self/exe")
	if err != nil {
		return false, err
	}
	want := map[string]bool{}
	for _, f := range o.r {
		fi, err := f.Stat()
		if err != nil {
			return false, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return false, errNoProc
		}
		want["pipe:["+strconv.FormatUint(st.Ino, 10)+"]"] = true
	}
	d, err := os.Open("/proc")
	if err != nil {
		return false, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return false, err
	}
	for _, name := range names {
		// The command decides how long a scan takes (processes with
		// full descriptor tables): past the deadline it is given up,
		// and finish fails closed.
		if time.Now().After(deadline) {
			return false, errScanTooLong
		}
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 || pid == self {
			continue // polc holds only the read ends
		}
		dir := "/proc/" + name + "/"
		fds, err := os.ReadDir(dir + "fd")
		if err != nil {
			continue // gone, or no descriptors to read (a zombie)
		}
		for i, fd := range fds {
			if i%256 == 255 && time.Now().After(deadline) {
				return false, errScanTooLong
			}
			if l, err := os.Readlink(dir + "fd/" + fd.Name()); err != nil || !want[l] || !writable(dir+"fdinfo/"+fd.Name()) {
				continue
			}
			ppid, _, _, ok := procStat(pid)
			if !ok {
				continue // gone
			}
			if ppid != self {
				return true, nil
			}
			// A child of polc's that cannot be stat'ed is ending; one
			// that exec'd another program has its close-on-exec
			// descriptors closed a moment after /proc shows the new
			// program, so finish confirms a foreign writer on a second
			// look.
			if exe, err := os.Stat(dir + "exe"); err == nil && !os.SameFile(exe, selfExe) {
				return true, nil
			}
		}
	}
	return false, nil
}

// writable reports whether the descriptor whose /proc fdinfo file is
// name is open for writing. One that cannot be read was closed meanwhile
// (finish fails closed on a writer it never finds).
func writable(name string) bool {
	b, err := os.ReadFile(name)
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("flags:")); ok {
			flags, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 8, 64)
			return err != nil || flags&unix.O_ACCMODE != unix.O_RDONLY
		}
	}
	return true
}
