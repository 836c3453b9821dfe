// splicer upstreams: print a running daemon's back-end servers (GET /upstreams) as a table: health check, skipped for failures, failures, drained; or drain one, or make it ready again.

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/splicer/splicer/forwarder"
)

func upstreamsCmd(args []string) error {
	fs := flag.NewFlagSet("upstreams", flag.ContinueOnError)
	adm := newAdminFlags(fs)
	asJSON := fs.Bool("json", false, "print the admin endpoint's JSON as it came")
	drain := fs.String("drain", "", "drain the back-end server at `HOST:PORT`: it gets no new connections or requests")
	ready := fs.String("ready", "", "make a drained back-end server at `HOST:PORT` take connections and requests again")
	listener := fs.String("listener", "", "with --drain or --ready: only in this listener (default: every one that has the server)")
	pool := fs.String("pool", "", "with --drain or --ready: only in this pool (\"upstream\" for a tcp or filter listener's list)")
	fs.Usage = func() {
		fmt.Fprint(cur.stderr, `Usage: splicer upstreams (--admin HOST:PORT | --config FILE) [--json]
       splicer upstreams (--admin HOST:PORT | --config FILE) (--drain | --ready) HOST:PORT [--listener NAME] [--pool NAME]

Print every back-end server of a running daemon's listeners (http-reverse's
pools, tcp's and filter's upstream lists as pool "upstream"): whether it
passed its last health check (yes without checks), whether failures have it
skipped now (max_fails within fail_timeout), how many failures it had,
whether it is drained, whether it is a backup, and the connections it
carries now (which max_conns bounds).

--drain takes a server out of rotation without a reload, as HAProxy's
"set server state drain": its connections and requests in flight carry on,
new ones go to the others. --ready puts it back. The state outlives a
reload and an upgrade, not a restart (weight: 0 in the file drains for
good).

Options:
`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
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
	if *drain != "" && *ready != "" {
		return errors.New("--drain and --ready: give one")
	}
	method, path := http.MethodGet, "/upstreams"
	if server, on := *drain+*ready, *drain != ""; server != "" {
		q := url.Values{"server": {server}}
		if *listener != "" {
			q.Set("listener", *listener)
		}
		if *pool != "" {
			q.Set("pool", *pool)
		}
		method, path = http.MethodPost, "/upstreams/ready?"+q.Encode()
		if on {
			path = "/upstreams/drain?" + q.Encode()
		}
	} else if *listener != "" || *pool != "" {
		return errors.New("--listener and --pool go with --drain or --ready")
	}
	body, err := adminRequest(method, *adm.addr, path, *adm.token, 10*time.Second)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := cur.stdout.Write(body)
		return err
	}
	var ups []forwarder.UpstreamState
	if err := json.Unmarshal(body, &ups); err != nil {
		return fmt.Errorf("GET /upstreams: %w", err)
	}
	return printUpstreams(cur.stdout, ups)
}

// printUpstreams writes ups as an aligned table, one server a line.
func printUpstreams(w io.Writer, ups []forwarder.UpstreamState) error {
	if len(ups) == 0 {
		_, err := fmt.Fprintln(w, "no listener picks among back-end servers (tcp, filter, http-reverse)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LISTENER\tPOOL\tSERVER\tHEALTHY\tSKIPPED\tFAILURES\tDRAINED\tBACKUP\tACTIVE")
	for _, u := range ups {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\n", u.Listener, u.Pool, u.Server, yesNo(u.Healthy), yesNo(u.Skipped), u.Failures, yesNo(u.Drained), yesNo(u.Backup), u.Active)
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
