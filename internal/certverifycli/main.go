// Package certverifycli implements certverify, the offline auditor's tool:
// it verifies evidence chains, task certificates, inclusion proofs and
// consistency proofs using only local files and an explicit trust file. No
// code path in it opens a network connection.
//
// Each subcommand lives in its own file with a run… function that tests call
// directly; Main only parses arguments, runs one and prints the report.
package certverifycli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/version"
)

// Exit codes: the contract of certverify.
const (
	ExitVerified     = 0 // everything checked and anchored to something trusted
	ExitFailed       = 1 // a verification finding of severity error
	ExitError        = 2 // could not run: usage, unreadable or unsupported input
	ExitInconclusive = 3 // internally consistent, but nothing trusted anchors the head
)

const usage = `usage:
  certverify chain LOG [--expected-head HEX] [--checkpoint NOTE]... [--trust FILE] [--require-closed]
  certverify cert CERT --chain LOG [--snapshot SNAP] [--trust FILE] [--expected-head HEX]
  certverify inclusion RECORD PROOF [--trust FILE]
  certverify consistency OLD NEW (--proof FILE | --chain LOG) [--trust FILE]

common flags: --format text|json  --max-findings N (default 100)
certverify --version prints the module version, VCS commit and Go version
exit codes: 0 verified, 1 failed, 2 could not run, 3 inconclusive (unanchored)
`

// Env is the process environment of a run: streams and a clock.
type Env struct {
	Stdout, Stderr io.Writer
	Now            func() time.Time
}

// usageError is an argument problem (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// inputError is an input that could not be read or is unsupported (exit 2).
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// Main runs certverify with os.Args and returns the exit code.
func Main() int {
	return Run(context.Background(), os.Args[1:], Env{Stdout: os.Stdout, Stderr: os.Stderr, Now: time.Now})
}

// Run runs certverify with args (without the program name).
func Run(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(env.Stderr, usage)
		if len(args) == 0 {
			return ExitError
		}
		return ExitVerified
	}
	if args[0] == "--version" || args[0] == "-version" {
		fmt.Fprint(env.Stdout, version.String("certverify"))
		return ExitVerified
	}
	cmd, rest := args[0], args[1:]
	start := env.Now()
	var rep *Report
	var format string
	var err error
	switch cmd {
	case "chain":
		var p chainParams
		if format, err = p.parse(rest); err == nil {
			rep, err = runChain(ctx, p)
		}
	case "cert":
		var p certParams
		if format, err = p.parse(rest); err == nil {
			rep, err = runCert(ctx, p)
		}
	case "inclusion":
		var p inclusionParams
		if format, err = p.parse(rest); err == nil {
			rep, err = runInclusion(ctx, p)
		}
	case "consistency":
		var p consistencyParams
		if format, err = p.parse(rest); err == nil {
			rep, err = runConsistency(ctx, p)
		}
	default:
		err = &usageError{fmt.Sprintf("unknown command %q", cmd)}
	}
	if hr := (*helpRequest)(nil); errors.As(err, &hr) {
		// certverify CMD -h: the usage and CMD's flags, exit 0 like
		// certverify -h.
		fmt.Fprint(env.Stderr, usage)
		hr.fs.SetOutput(env.Stderr)
		fmt.Fprintf(env.Stderr, "\nflags of %s:\n", cmd)
		hr.fs.PrintDefaults()
		return ExitVerified
	}
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(env.Stderr, "certverify: %v\n%s", err, usage)
		} else {
			fmt.Fprintf(env.Stderr, "certverify: %v\n", err)
		}
		if format == "json" {
			writeJSON(env.Stdout, errorReport(cmd, err))
		}
		return ExitError
	}
	rep.finish(env.Now().Sub(start))
	if format == "json" {
		writeJSON(env.Stdout, rep)
	} else {
		rep.writeText(env.Stdout)
	}
	return rep.ExitCode
}

// common holds the flags every subcommand has.
type common struct {
	format      string
	maxFindings int
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.format, "format", "text", "output format: text or json")
	fs.IntVar(&c.maxFindings, "max-findings", chain.DefaultMaxFindings, "findings to report before counting the rest")
}

func (c *common) check() error {
	if c.format != "text" && c.format != "json" {
		return &usageError{fmt.Sprintf("--format %q: want text or json", c.format)}
	}
	if c.maxFindings < 1 {
		return &usageError{"--max-findings must be at least 1"}
	}
	return nil
}

// parseArgs parses flags and positionals in any order (the CLI contract
// puts positionals first, which the flag package alone does not allow).
// "--" ends flag parsing.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			return nil, &helpRequest{fs}
		} else if err != nil {
			return nil, &usageError{err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// helpRequest is -h or --help after a command.
type helpRequest struct{ fs *flag.FlagSet }

func (h *helpRequest) Error() string { return "help requested" }

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// readInput reads a file named on the command line ("-" is stdin). It
// reads at most limit+1 bytes (limit < 0: no limit): every bounded input's
// parser rejects more than limit bytes, so the first limit+1 give the same
// verdict as the whole file, without buffering a hostile multi-gigabyte
// certificate, note, proof or record in memory.
func readInput(what, path string, limit int64) ([]byte, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, &inputError{fmt.Errorf("%s: %w", what, err)}
		}
		defer f.Close()
		r = f
	}
	if limit >= 0 {
		r = io.LimitReader(r, limit+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, &inputError{fmt.Errorf("%s: %w", what, err)}
	}
	return b, nil
}

// openLog opens a chain file ("-" is stdin).
func openLog(path string) (io.ReadCloser, error) {
	if path == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &inputError{err}
	}
	return f, nil
}

// loadTrust reads and parses a trust file ("" = none).
func loadTrust(path string) (*chain.Trust, error) {
	if path == "" {
		return nil, nil
	}
	b, err := readInput("trust file", path, chain.MaxTrustBytes)
	if err != nil {
		return nil, err
	}
	t, err := chain.ParseTrust(b)
	if err != nil {
		return nil, &inputError{fmt.Errorf("%s: %w", path, err)}
	}
	return t, nil
}

// parseHead parses --expected-head ("" = none).
func parseHead(s string) (*chain.Hash, error) {
	if s == "" {
		return nil, nil
	}
	h, err := chain.ParseHash(s)
	if err != nil {
		return nil, &usageError{"--expected-head: want 64 lowercase hex characters"}
	}
	return &h, nil
}
