// splicer completion: shell completion scripts for bash and zsh.

package main

import (
	"fmt"
	"sort"
	"strings"
)

const bashCompletion = `# bash completion for splicer; source it or put it in /usr/share/bash-completion/completions/splicer
_splicer() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "%s" -- "$cur"))
		return
	fi
	case "$prev" in
	--config|-c|--pid-file) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	esac
	case "${COMP_WORDS[1]}" in
	run) COMPREPLY=($(compgen -W "--config --pid-file" -- "$cur")) ;;
	check) COMPREPLY=($(compgen -f -W "--config" -- "$cur")) ;;
	reload|upgrade) COMPREPLY=($(compgen -W "--admin --config --pid-file" -- "$cur")) ;;
	upstreams) COMPREPLY=($(compgen -W "--admin --config --token --json --drain --ready --listener --pool" -- "$cur")) ;;
	completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
	help) COMPREPLY=($(compgen -W "%s" -- "$cur")) ;;
	esac
}
complete -F _splicer splicer
`

const zshCompletion = `#compdef splicer
# zsh completion for splicer; put it in a directory of $fpath as _splicer
_splicer() {
	local -a cmds
	cmds=(%s)
	if (( CURRENT == 2 )); then
		_describe 'command' cmds
		return
	fi
	case $words[2] in
	run) _arguments '--config[configuration file]:file:_files' '--pid-file[pid file]:file:_files' ;;
	check) _files ;;
	reload|upgrade) _arguments '--admin[admin address]:address:' '--config[configuration file]:file:_files' '--pid-file[pid file]:file:_files' ;;
	upstreams) _arguments '--admin[admin address]:address:' '--config[configuration file]:file:_files' '--token[admin token]:token:' '--json[print the JSON]' '--drain[drain a server]:address:' '--ready[make a drained server ready]:address:' '--listener[only in this listener]:name:' '--pool[only in this pool]:name:' ;;
	completion) _values 'shell' bash zsh ;;
	esac
}
_splicer "$@"
`

func completionCmd(args []string) error {
	if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
		fmt.Fprint(cur.stderr, "Usage: splicer completion bash|zsh\n\nPrints a completion script:\n  splicer completion bash > /usr/share/bash-completion/completions/splicer\n  splicer completion zsh > \"${fpath[1]}/_splicer\"\n")
		return errSilent
	}
	names := []string{"version", "help"}
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	if args[0] == "bash" {
		fmt.Fprintf(cur.stdout, bashCompletion, strings.Join(names, " "), strings.Join(names, " "))
		return nil
	}
	fmt.Fprintf(cur.stdout, zshCompletion, strings.Join(names, " "))
	return nil
}
