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
	if s, _, ok := procStat(pid); ok && s == sid {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// sessionMembers lists the processes of the session sid that are not
// zombies (a zombie runs nothing).
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
		if s, state, ok := procStat(pid); ok && s == sid && state != 'Z' && state != 'X' {
			live = append(live, pid)
		}
	}
	if len(names) == 0 {
		return nil, errors.New("/proc lists no process")
	}
	return live, nil
}

// procStat reads the session and state of the process pid from
// /proc/PID/stat: "PID (COMM) STATE PPID PGRP SESSION …", COMM any bytes
// (so the fields are after its last ')').
func procStat(pid int) (session int, state byte, ok bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	var buf [512]byte
	n, _ := f.Read(buf[:])
	f.Close()
	b := buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 4 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	s, err := strconv.Atoi(string(fields[3]))
	if err != nil {
		return 0, 0, false
	}
	return s, fields[0][0], true
}
