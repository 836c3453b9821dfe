// splicer upstreams: print a running daemon's back-end servers (GET /upstreams) as a table: health check, skipped for failures, failures.

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/splicer/splicer/forwarder"
)

func upstreamsCmd(args []string) error {
	fs := flag.NewFlagSet("upstreams", flag.ExitOnError)
	adm := newAdminFlags(fs)
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
	if err := adm.resolve(); err != nil {
		return err
	}
	if *adm.addr == "" {
		fs.Usage()
		return errSilent
	}
	body, err := adminRequest(http.MethodGet, *adm.addr, "/upstreams", *adm.token, 10*time.Second)
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
