//go:build !unix

package builtin

import (
	"context"
	"os/exec"
)

// isolate: there are no sessions here.
func isolate(*exec.Cmd) {}

// waitCommand waits for cmd, started by startCommand, killing its main
// process when ctx is done. Processes it started are not found here.
func waitCommand(ctx context.Context, cmd *exec.Cmd) (ended, error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return ended{}, err
	case <-ctx.Done():
		cmd.Process.Kill()
		return ended{}, <-done
	}
}
