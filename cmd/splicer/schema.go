// splicer schema: print a JSON Schema of the configuration file, for editors.

package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/splicer/splicer/internal/config"
)

func schemaCommand() *cobra.Command {
	return &cobra.Command{
		Use: "schema", Short: "print a JSON Schema of the configuration file",
		Long: `Usage: splicer schema > splicer.schema.json

Prints a JSON Schema (draft 2020-12) of the configuration file: every key,
its type and default, and the values of the enumerated keys (the engines
this binary has). Editors with YAML support use it to complete keys and
flag mistakes as you type, e.g. with yaml-language-server:
  # yaml-language-server: $schema=splicer.schema.json
splicer check validates a file fully. docs/configuration.md describes
every key.
`,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return printUsage(c)
			}
			return writeSchema(cur.stdout)
		},
	}
}

// writeSchema writes the schema and a final newline to w.
func writeSchema(w io.Writer) error {
	b, err := config.JSONSchema()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
