// Command polc compiles PermissionPolicy declarations into canonical policy
// snapshots and checks them. See README.md and docs/cli.md.
package main

import (
	"os"

	"polc.dev/polc/internal/polccli"
)

func main() { os.Exit(polccli.Main()) }
