//go:build !unix

package chain

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
