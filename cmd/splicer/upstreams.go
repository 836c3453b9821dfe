// splicer upstreams: print a running daemon's back-end servers (GET /upstreams) as a table: health check, skipped for failures, failures, drained; or drain one, or make it ready again.

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/splicer/splicer/forwarder"
)

// upstreamsFlags are splicer upstreams' flags.
type upstreamsFlags struct {
	adminFlags
	asJSON                       bool
	drain, ready, listener, pool string
}

func upstreamsCommand() *cobra.Command {
	var f upstreamsFlags
	c := &cobra.Command{
		Use: "upstreams", Short: "the back-end servers and their state; drain or ready one",
		Long: `Usage: splicer upstreams (--admin HOST:PORT | --config FILE) [--json]
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
`,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return printUsage(c)
			}
			if err := f.resolve(); err != nil {
				return err
			}
			if *f.addr == "" {
				return printUsage(c)
			}
			return f.run()
		},
	}
	f.adminFlags = newAdminFlags(c)
	fs := c.Flags()
	fs.BoolVar(&f.asJSON, "json", false, "print the admin endpoint's JSON as it came")
	fs.StringVar(&f.drain, "drain", "", "drain the back-end server at HOST:PORT: it gets no new connections or requests")
	fs.StringVar(&f.ready, "ready", "", "make a drained back-end server at HOST:PORT take connections and requests again")
	fs.StringVar(&f.listener, "listener", "", "with --drain or --ready: only in this listener (default: every one that has the server)")
	fs.StringVar(&f.pool, "pool", "", "with --drain or --ready: only in this pool (\"upstream\" for a tcp or filter listener's list)")
	return c
}

// run prints the daemon's back-end servers, or drains or readies
// one.
func (f *upstreamsFlags) run() error {
	if f.drain != "" && f.ready != "" {
		return errors.New("--drain and --ready: give one")
	}
	method, path := http.MethodGet, "/upstreams"
	if server, on := f.drain+f.ready, f.drain != ""; server != "" {
		q := url.Values{"server": {server}}
		if f.listener != "" {
			q.Set("listener", f.listener)
		}
		if f.pool != "" {
			q.Set("pool", f.pool)
		}
		method, path = http.MethodPost, "/upstreams/ready?"+q.Encode()
		if on {
			path = "/upstreams/drain?" + q.Encode()
		}
	} else if f.listener != "" || f.pool != "" {
		return errors.New("--listener and --pool go with --drain or --ready")
	}
	body, err := adminRequest(method, *f.addr, path, *f.token, 10*time.Second)
	if err != nil {
		return err
	}
	if f.asJSON {
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
