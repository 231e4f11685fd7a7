// Package polccli implements the polc command line. Each subcommand lives in
// its own file with a run function that tests call directly; this file holds
// the root command, exit codes and diagnostic printing.
package polccli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/version"
	"polc.dev/polc/sandbox"
)

// Exit codes (docs/errors.md "Exit codes (polc)").
const (
	ExitOK       = 0 // success
	ExitFindings = 1 // policy or verification findings
	ExitUsage    = 2 // usage error or unreadable input
)

// exitError carries an exit code for output that was already printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// usageError is a usage problem; it is printed and exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// abs is path relative to the working directory (path itself when
// absolute).
func (e *env) abs(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(e.dir, path)
}

// env is what every command needs from the process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	dir            string
}

// Main runs polc with the process's arguments and returns the exit code.
// It first lets package sandbox take over a process started as its
// launcher (the landlock backend re-executes polc to contain an action).
func Main() int {
	sandbox.Init()
	dir, _ := os.Getwd()
	return Run(context.Background(), os.Args[1:], &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, dir: dir})
}

// Run runs polc with args and returns the exit code.
func Run(ctx context.Context, args []string, e *env) int {
	groups := map[*cobra.Command]func(*cobra.Command, []string) error{}
	root := &cobra.Command{
		Use:           "polc",
		Short:         "polc compiles permission policies into canonical snapshots",
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version.String("polc"),
	}
	// Cobra prints Version for --version (before needSubcommand's RunE);
	// declared here so that it gets no -v shorthand.
	root.Flags().Bool("version", false, "print the module version, VCS commit and Go version")
	root.SetVersionTemplate("{{.Version}}")
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetArgs(args)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{err.Error()} })
	root.AddCommand(
		newVetCmd(e), newCompileCmd(e), newCanonCmd(e), newExportCmd(e),
		newImportCmd(e), newSchemaCmd(e), newEvalCmd(e), newNormalizeCmd(e), newTestCmd(e), newProveCmd(e),
		newDiffCmd(e), newKeygenCmd(e), newHarnessCmd(e), newRunCmd(e), newServeCmd(e), newMCPCmd(e), newEvidenceCmd(e),
		newApprovalsCmd(e), newApproveCmd(e), newDenyApprovalCmd(e), newBundleCmd(e),
	)
	defaultHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		if g, ok := groups[c]; ok {
			// A group's help shows no "polc [flags]" line: the group
			// alone does nothing (needSubcommand).
			c.RunE = nil
			defer func() { c.RunE = g }()
		}
		defaultHelp(c, args)
	})
	// Cobra adds its completion and help commands only when executing,
	// after needSubcommand would have run: add them now, so that
	// "polc completion" alone (or with an unknown shell) is a usage error
	// like any group, and "polc help TOPIC" can refuse an unknown topic.
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "help" && c.Run != nil {
			help := c.Run
			c.Run = nil
			c.RunE = func(c *cobra.Command, args []string) error {
				// Cobra prints "Unknown help topic" and the usage on
				// stdout, and exits 0.
				if cmd, _, err := c.Root().Find(args); cmd == nil || err != nil {
					return usagef("unknown help topic %q", strings.Join(args, " "))
				}
				help(c, args)
				return nil
			}
		}
	}
	needSubcommand(root, groups)
	err := root.ExecuteContext(ctx)
	var ee *exitError
	var ue *usageError
	switch {
	case err == nil, errors.As(err, &ee):
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "polc: %s\n", ue.msg)
	default:
		// Cobra's own argument errors ("unknown command", "accepts 1 arg").
		fmt.Fprintf(e.stderr, "polc: %v\n", err)
	}
	return exitCode(err)
}

// needSubcommand makes c and every command under it that only groups
// subcommands (polc, polc harness, …) a usage error when run without one:
// their help on stderr, exit 2. Cobra would print the help and exit 0,
// which a CI script would take for success. groups records them.
func needSubcommand(c *cobra.Command, groups map[*cobra.Command]func(*cobra.Command, []string) error) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.RunE = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], c.CommandPath())
			}
			c.SetOut(c.ErrOrStderr())
			_ = c.Help()
			return usagef("%s needs a command", c.CommandPath())
		}
		groups[c] = c.RunE
	}
	for _, sub := range c.Commands() {
		needSubcommand(sub, groups)
	}
}

// exitCode is the exit code of a subcommand's error: ExitOK for nil, an
// exitError's own code, ExitUsage for anything else (usage errors and
// cobra's argument errors).
func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.code
	}
	return ExitUsage
}

// diagFormat validates a --diagnostics value.
func diagFormat(s string) (diag.Format, error) {
	switch f := diag.Format(s); f {
	case diag.FormatText, diag.FormatJSON, diag.FormatGitHub, diag.FormatSARIF:
		return f, nil
	}
	return "", usagef("--diagnostics %q: want text, json, github or sarif", s)
}

// movedFormat gives c, whose output is diagnostics, a hidden --format that
// only says where the option went. Across polc and certverify --format is
// the format of a command's output document and --diagnostics that of its
// diagnostics (docs/cli.md); vet, compile and test once took --format for
// the latter, and a script still passing it is told, not misread.
func movedFormat(c *cobra.Command) {
	c.Flags().String("format", "", "")
	c.Flags().MarkHidden("format")
	run := c.RunE
	c.RunE = func(c *cobra.Command, args []string) error {
		if c.Flags().Changed("format") {
			return usagef("%s: the diagnostics format is --diagnostics (text, json, github or sarif); --format is for output documents", c.CommandPath())
		}
		return run(c, args)
	}
}

// report prints diagnostics and returns the exit error they imply: 2 when
// an input could not be read, 1 for other errors, nil for none.
func report(e *env, l diag.List, f diag.Format) error {
	w := e.stderr
	if f.Document() {
		w = e.stdout
	}
	if len(l) > 0 || f.Document() {
		if err := diag.Print(w, l, f); err != nil {
			return err
		}
	}
	return exitFor(l)
}

// reportOne reports one diagnostic (an error) at pos, as report does.
func reportOne(e *env, pos diag.Pos, code, format string, args ...any) error {
	var d diag.List
	d.Add(pos, code, format, args...)
	return report(e, d, diag.FormatText)
}

func exitFor(l diag.List) error {
	for _, d := range l {
		if d.Severity == diag.Error && (d.Code == diag.CodeIO || d.Code == diag.CodeInvalidInput) {
			return &exitError{ExitUsage}
		}
	}
	if l.HasErrors() {
		return &exitError{ExitFindings}
	}
	return nil
}
