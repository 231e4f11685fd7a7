package polccli

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/spf13/cobra"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/jcs"
)

func newCanonCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "canon [FILE]",
		Short: "Print the RFC 8785 canonical form of JSON (stdin by default)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			file := ""
			if len(args) == 1 {
				file = args[0]
			}
			return runCanon(c.Context(), e, file)
		},
	}
}

func runCanon(_ context.Context, e *env, file string) error {
	name, data, err := readInput(e, file)
	if err != nil {
		return reportOne(e, diag.Pos{File: name}, diag.CodeIO, "cannot read: %v", err)
	}
	out, err := jcs.Transform(data)
	if err != nil {
		var d diag.List
		var se *jcs.SyntaxError
		if errors.As(err, &se) {
			d.Add(diag.Pos{File: name, Line: se.Line, Col: se.Col}, diag.CodeInvalidInput, "%s", se.Msg)
		} else {
			d.Add(diag.Pos{File: name}, diag.CodeInvalidInput, "%v", err)
		}
		return report(e, d, diag.FormatText)
	}
	_, err = e.stdout.Write(out)
	return err
}

// readInput reads file (relative to the working directory) or, when file
// is "" or "-", standard input.
func readInput(e *env, file string) (name string, data []byte, err error) {
	if file == "" || file == "-" {
		data, err = io.ReadAll(e.stdin)
		return "<stdin>", data, err
	}
	abs := e.abs(file)
	data, err = os.ReadFile(abs)
	if pe, ok := err.(*os.PathError); ok {
		err = pe.Err
	}
	return diag.Rel(e.dir, abs), data, err
}
