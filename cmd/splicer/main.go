// Command splicer is a Linux TCP forwarder that takes the proxy out of the data path by splicing connection pairs.
package main

import (
	"fmt"
	"os"
)

const usage = `splicer: a TCP forwarder that splices connection pairs so the kernel moves the bytes.

A proxy (tcp, ...) runs each connection pair in control mode, then hands it to
an engine that forwards without the proxy in the data path:
  copy     read()/write() through a user-space buffer (runs everywhere)
  pipe     splice(2) through a kernel pipe (runs everywhere)
  sockmap  BPF sockhash: the kernel moves data between the sockets (root)
  ip       BPF at tc rewrites TCP headers; no TCP runs on the forwarder (root)
  auto     the deepest engine this host allows, falling back when one declines

Usage:
  splicer run   --config FILE    run the forwarder
  splicer check --config FILE    validate a configuration, report every error with its line
  splicer reload  --admin ADDR   re-read a running daemon's configuration (or --config, --pid-file)
  splicer upgrade --admin ADDR   replace a running daemon's binary without refusing a connection
  splicer demo                   build a lab, push traffic through every engine, print a table
  splicer bench EXPERIMENT       reproduce the papers' experiments (see 'splicer bench -h')
  splicer hash-password          hash a socks5 user's password (read from stdin) for the configuration
  splicer version

Run 'splicer COMMAND -h' for a command's options.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	raiseFileLimit()
	var err error
	switch cmd {
	case "run":
		err = runCmd(args)
	case "check":
		err = checkCmd(args)
	case "reload":
		err = reloadCmd(args)
	case "upgrade":
		err = upgradeCmd(args)
	case "demo":
		err = demoCmd(args)
	case "bench":
		err = benchCmd(args)
	case "hash-password":
		err = hashPasswordCmd(args)
	case "version", "--version":
		fmt.Println("splicer", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "splicer: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		if err != errSilent {
			fmt.Fprintln(os.Stderr, "splicer:", err)
		}
		os.Exit(1)
	}
}
