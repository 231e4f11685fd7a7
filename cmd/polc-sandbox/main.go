// Command polc-sandbox is the sandbox's dedicated launcher. polc starts it,
// when it lies next to the polc executable, to run a command under package
// sandbox: it restricts itself and executes the command. Starting this
// small program costs far less than re-executing polc. It is not meant to
// be run by hand.
package main

import "polc.dev/polc/sandbox"

func main() { sandbox.LauncherMain() }
