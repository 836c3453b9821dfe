// splicer check: validate a configuration and report every error with its file and line.

package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/splicer/splicer/internal/config"
)

// errSilent is returned when the command already printed what went wrong.
var errSilent = errors.New("")

func checkCmd(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	path := fs.String("config", "", "configuration file (YAML) to validate")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: splicer check --config FILE

Validates FILE without starting anything: unknown keys, wrong types, bad
addresses, durations, sizes and engine names are reported each with its line,
all at once. Exits 0 when the configuration is valid, 1 otherwise.
`)
	}
	fs.Parse(args)
	if *path == "" {
		fs.Usage()
		return errSilent
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	fmt.Printf("%s: ok, %d listener(s)\n", *path, len(cfg.Listeners))
	for _, l := range cfg.Listeners {
		to := ""
		if len(l.Upstream) > 0 {
			to = fmt.Sprintf(" -> %v", l.Upstream)
		}
		fmt.Printf("  %s: %s proxy on %s%s, engine %s\n", l.Name, l.Proxy, l.Listen, to, l.Engine)
	}
	return nil
}

// loadConfig loads path and prints each configuration error on its own line.
func loadConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, e.Error())
		}
		fmt.Fprintf(os.Stderr, "%s: %d error(s)\n", path, len(errs))
		return nil, errSilent
	}
	return cfg, err
}
