// Command certverify verifies polc evidence chains, task certificates and
// Merkle proofs offline. See docs/certverify.md.
package main

import (
	"os"

	"polc.dev/polc/internal/certverifycli"
)

func main() { os.Exit(certverifycli.Main()) }
