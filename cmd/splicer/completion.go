// splicer completion and splicer help: shell completion scripts (bash, zsh, fish) that ask the binary itself, through cobra, for commands, flags and files; and each command's help.

package main

import (
	"strings"

	"github.com/spf13/cobra"
)

func completionCommand() *cobra.Command {
	return &cobra.Command{
		Use: "completion bash|zsh|fish", Short: "print a shell completion script",
		ValidArgs: []cobra.Completion{"bash", "zsh", "fish"},
		Long: `Usage: splicer completion bash|zsh|fish

Prints a completion script for the shell: commands, their flags, and
files where a command takes them. The script asks the splicer binary on
PATH, so it stays right across upgrades. The packages install them; by hand:
  splicer completion bash > /usr/share/bash-completion/completions/splicer
  splicer completion zsh > /usr/share/zsh/vendor-completions/_splicer
  splicer completion fish > /usr/share/fish/vendor_completions.d/splicer.fish
or for this shell only: source <(splicer completion bash)
`,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return printUsage(c)
			}
			root, w := c.Root(), c.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			case "fish":
				return root.GenFishCompletion(w, true)
			}
			return printUsage(c)
		},
	}
}

// helpCommand prints the help of the command it names, or of splicer;
// a name splicer lacks is a usage error that lists the commands.
func helpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use: "help [COMMAND]", Short: "a command's options",
		Long: "Usage: splicer help [COMMAND]\n\nPrints what COMMAND does and its options, or what splicer's commands are.\n",
		ValidArgsFunction: func(_ *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var names []cobra.Completion
			for _, c := range root.Commands() {
				if len(args) == 0 && c.IsAvailableCommand() && strings.HasPrefix(c.Name(), prefix) {
					names = append(names, cobra.CompletionWithDesc(c.Name(), c.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return root.Help()
			}
			c, _, err := root.Find(args)
			if err != nil || c == root {
				return unknownCommand(root, args[0])
			}
			c.InitDefaultHelpFlag()
			return c.Help()
		},
	}
}
