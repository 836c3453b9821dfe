#!/bin/sh
# completions.sh DIR: write splicer's shell completion scripts (splicer.bash, splicer.zsh, splicer.fish) into DIR for the packages; goreleaser runs it before it builds them.
set -e
dir=${1:?usage: completions.sh DIR}
mkdir -p "$dir"
go build -o "$dir/splicer" ./cmd/splicer
for shell in bash zsh fish; do
	"$dir/splicer" completion "$shell" >"$dir/splicer.$shell"
done
rm "$dir/splicer"
