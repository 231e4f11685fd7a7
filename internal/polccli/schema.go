package polccli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"polc.dev/polc/schema"
)

func newSchemaCmd(e *env) *cobra.Command {
	c := &cobra.Command{Use: "schema", Short: "Work with polc's schemas"}
	var format string
	export := &cobra.Command{
		Use:   "export [--format cue|snapshot-jsonschema]",
		Short: "Print the #PermissionPolicy and #HarnessSpec CUE schema or the snapshot JSON Schema",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return runSchemaExport(c.Context(), e, format)
		},
	}
	export.Flags().StringVar(&format, "format", "cue", "cue (declarations) or snapshot-jsonschema")
	c.AddCommand(export)
	return c
}

func runSchemaExport(_ context.Context, e *env, format string) error {
	switch format {
	case "cue":
		_, err := fmt.Fprint(e.stdout, schema.Declarations())
		return err
	case "snapshot-jsonschema":
		_, err := fmt.Fprint(e.stdout, schema.SnapshotJSONSchema)
		return err
	}
	return usagef("--format %q: want cue or snapshot-jsonschema", format)
}
