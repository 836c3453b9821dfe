// splicer upstreams: print a running daemon's back-end servers (GET /upstreams) as a table: health check, skipped for failures, failures.

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/splicer/splicer/forwarder"
)

func upstreamsCmd(args []string) error {
	fs := flag.NewFlagSet("upstreams", flag.ExitOnError)
	adminAddr := fs.String("admin", "", "the daemon's admin address (host:port)")
	cfgPath := fs.String("config", "", "the daemon's configuration file: its admin address is used")
	token := fs.String("token", os.Getenv("SPLICER_ADMIN_TOKEN"), "the admin_token, if the daemon has one (default $SPLICER_ADMIN_TOKEN; with --config, the file's)")
	asJSON := fs.Bool("json", false, "print GET /upstreams' JSON as it came")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: splicer upstreams (--admin HOST:PORT | --config FILE) [--json]

Print every back-end server of a running daemon's listeners (http-reverse's
pools, tcp's and filter's upstream lists as pool "upstream"): whether it
passed its last health check (yes without checks), whether failures have it
skipped now (max_fails within fail_timeout), and how many failures it had.

Options:
`)
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if fs.NArg() > 0 {
		fs.Usage()
		return errSilent
	}
	if *cfgPath != "" {
		if err := adminFromConfig(*cfgPath, adminAddr, token); err != nil {
			return err
		}
	}
	if *adminAddr == "" {
		fs.Usage()
		return errSilent
	}
	body, err := getAdmin(*adminAddr, "/upstreams", *token)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := os.Stdout.Write(body)
		return err
	}
	var ups []forwarder.UpstreamState
	if err := json.Unmarshal(body, &ups); err != nil {
		return fmt.Errorf("GET /upstreams: %w", err)
	}
	return printUpstreams(os.Stdout, ups)
}

// printUpstreams writes ups as an aligned table, one server a line.
func printUpstreams(w io.Writer, ups []forwarder.UpstreamState) error {
	if len(ups) == 0 {
		_, err := fmt.Fprintln(w, "no listener picks among back-end servers (tcp, filter, http-reverse)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LISTENER\tPOOL\tSERVER\tHEALTHY\tSKIPPED\tFAILURES")
	for _, u := range ups {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", u.Listener, u.Pool, u.Server, yesNo(u.Healthy), yesNo(u.Skipped), u.Failures)
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// getAdmin GETs path from the admin endpoint at addr and returns the body.
func getAdmin(addr, path, token string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+adminHost(addr)+path, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(strings.TrimSpace(string(body)))
	}
	return body, nil
}
