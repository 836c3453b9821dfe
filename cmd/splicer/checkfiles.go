// What splicer check adds to the configuration's own rules: the files the configuration names must be there for 'splicer run' to use, as the user running check, each problem reported at its key's FILE:LINE:COL.

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/supervisor"
)

// checkConfig loads path as 'splicer run' would and prints every
// problem: the configuration's errors, then those of the files it names
// (fileErrors), which run would otherwise meet only once it starts.
func checkConfig(path string) (*config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Parse(path, data)
	errs, _ := err.(config.Errors)
	if err != nil && errs == nil {
		return nil, err
	}
	if err == nil {
		errs = fileErrors(path, data, cfg)
	}
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(cur.stderr, e.Error())
		}
		fmt.Fprintf(cur.stderr, "%s: %d error(s)\n", path, len(errs))
		return nil, errSilent
	}
	// Whatever else run's loading refuses.
	return supervisor.LoadConfig(cur.stderr, path)
}

// fileErrors checks the files cfg, read from path, names: the
// admin_token_file readable and not empty (config.Load reads it relative
// to the configuration's directory), the access log's file open for
// appending, or its directory for creating it.
func fileErrors(path string, data []byte, cfg *config.Config) config.Errors {
	var errs config.Errors
	at := func(keyPath string, err error) {
		line, col := keyPosition(data, strings.Split(keyPath, ".")...)
		errs = append(errs, config.Error{File: path, Line: line, Column: col, Path: keyPath, Msg: err.Error()})
	}
	if f := cfg.AdminTokenFile; f != "" {
		if !filepath.IsAbs(f) {
			f = filepath.Join(filepath.Dir(path), f)
		}
		if b, err := os.ReadFile(f); err != nil {
			at("admin_token_file", err)
		} else if strings.TrimSpace(string(b)) == "" {
			at("admin_token_file", fmt.Errorf("%s is empty", f))
		}
	}
	if p := cfg.AccessLog.Path; p != "" && p != "-" {
		if err := appendable(p); err != nil {
			at("access_log.path", err)
		}
	}
	return errs
}

// appendable reports why this user could not open path for appending,
// creating it if missing, as run opens the access log; nil if it could.
// It creates nothing.
func appendable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		dir := filepath.Dir(path)
		if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
			return fmt.Errorf("cannot create %s: %s: %w", path, dir, err)
		}
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s is a directory", path)
	}
	if err := unix.Access(path, unix.W_OK); err != nil {
		return fmt.Errorf("cannot append to %s: %w", path, err)
	}
	return nil
}

// keyPosition finds the line and column of the value at keys (a path
// of mapping keys from the top) in the YAML data, where the
// configuration's own errors point; 0, 0 when it cannot tell (a key set
// through a merge key).
func keyPosition(data []byte, keys ...string) (line, col int) {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return 0, 0
	}
	n := doc.Content[0]
	for _, k := range keys {
		var value *yaml.Node
		for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				value = n.Content[i+1]
				break
			}
		}
		if value == nil {
			return 0, 0
		}
		for value.Kind == yaml.AliasNode && value.Alias != nil {
			value = value.Alias
		}
		n = value
	}
	return n.Line, n.Column
}
