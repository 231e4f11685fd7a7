// Command flushmodes measures what one writer's durable appends cost on
// this machine's disk in the ways a file store can lay out its file:
//
//	zeroed   groups written over zeros already written and synced (the
//	         file store's reserve when it is ahead), made durable with
//	         fdatasync: no file metadata changes, no journal commit;
//	zeroing  the same while another goroutine lays zeros ahead at the
//	         data's pace (what the reserve costs while it is extended);
//	grow     groups appended to a growing file (fdatasync commits the
//	         size and the new blocks: a journal commit per group);
//	falloc   groups written into fallocate'd, unwritten space (the
//	         extents' conversion is journaled per group).
//
// It prints µs per flush and MB/s of data made durable for each mode, and
// -hogs N adds N CPU-bound goroutines (on a VM, flush latency can follow
// the guest's CPU load). Linux only (fdatasync, fallocate,
// sync_file_range). docs/executor.md quotes its numbers.
//
// Usage: go run ./bench/flushmodes [-group 41984] [-for 3s] [-hogs 0] [-dir DIR]

//go:build linux

package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
)

func main() {
	group := flag.Int("group", 41984, "bytes per flush (the executor's groups are ~35-45 KB)")
	dur := flag.Duration("for", 3*time.Second, "how long each mode runs")
	hogs := flag.Int("hogs", 0, "CPU-bound goroutines running meanwhile")
	dir := flag.String("dir", os.TempDir(), "directory for the scratch file (the disk under test)")
	flag.Parse()
	stop := make(chan struct{})
	for range *hogs {
		go hog(stop)
	}
	for _, mode := range []string{"zeroed", "zeroing", "grow", "falloc"} {
		us, mbs, err := run(*dir, mode, *group, *dur)
		if err != nil {
			fmt.Fprintf(os.Stderr, "flushmodes: %s: %v\n", mode, err)
			os.Exit(1)
		}
		fmt.Printf("%-8s group=%dB hogs=%d: %6.0f us/flush %6.1f MB/s\n", mode, *group, *hogs, us, mbs)
	}
	close(stop)
}

func hog(stop chan struct{}) {
	x := 0
	for {
		select {
		case <-stop:
			return
		default:
		}
		for j := range 100000 {
			x += j * j
		}
		runtime.Gosched()
	}
}

const piece = 256 << 10

// run appends groups for d in the given mode and returns µs per flush and
// MB/s of data made durable.
func run(dir, mode string, group int, d time.Duration) (float64, float64, error) {
	f, err := os.CreateTemp(dir, "flushmodes")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	fd := int(f.Fd())
	zeros := make([]byte, piece)
	// zeroFill writes and syncs zeros over [0, n).
	zeroFill := func(n int64) error {
		for off := int64(0); off < n; off += piece {
			if _, err := f.WriteAt(zeros, off); err != nil {
				return err
			}
		}
		return syscall.Fdatasync(fd)
	}
	// Room for the whole run at up to ~180 MB/s (the zeroed mode writes it
	// all first); the zeroing mode grows its zeros as it goes.
	room := int64(d.Seconds()*180e6) + 64<<20
	// flushed is told the data's new end after every flush.
	flushed := func(int64) {}
	switch mode {
	case "zeroed":
		if err := zeroFill(room); err != nil {
			return 0, 0, err
		}
	case "falloc":
		if err := syscall.Fallocate(fd, 0, 0, room); err != nil {
			return 0, 0, err
		}
		if err := syscall.Fsync(fd); err != nil {
			return 0, 0, err
		}
	case "zeroing":
		// 8 MiB written and synced ahead to start with, then zeros laid
		// 8 MiB ahead of the data by another goroutine, each piece written
		// back (sync_file_range) as the file store's reserve does.
		const ahead = 8 << 20
		if err := zeroFill(ahead); err != nil {
			return 0, 0, err
		}
		room = 1 << 62
		ends := make(chan int64, 1)
		done := make(chan struct{})
		defer close(done)
		go func() {
			zoff := int64(ahead)
			for {
				select {
				case <-done:
					return
				case end := <-ends:
					for ; zoff-end < ahead; zoff += piece {
						syscall.Pwrite(fd, zeros, zoff)
						syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, uintptr(fd), uintptr(zoff), piece, 7, 0, 0)
					}
				}
			}
		}()
		flushed = func(end int64) {
			select {
			case ends <- end:
			default: // the writer is busy; it gets a later end
			}
		}
	}
	buf := make([]byte, group)
	for i := range buf {
		buf[i] = 'x'
	}
	var data int64
	n, start := 0, time.Now()
	for time.Since(start) < d && data+int64(group) <= room {
		if _, err := syscall.Pwrite(fd, buf, data); err != nil {
			return 0, 0, err
		}
		if err := syscall.Fdatasync(fd); err != nil {
			return 0, 0, err
		}
		data += int64(group)
		n++
		flushed(data)
	}
	el := time.Since(start)
	return el.Seconds() * 1e6 / float64(n), float64(data) / el.Seconds() / 1e6, nil
}
