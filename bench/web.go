// The web experiment (seed 002): GET and CONNECT through splicer's HTTP forward proxy per engine and object size, a connection per request; beside it wrk through http-reverse and the peers (switchwrk.go).

package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/splicer/splicer/loadgen"
	"github.com/splicer/splicer/origin"
)

// webConcurrency is how many clients request at once in web; each request
// dials its own connection, as the HTTP/1.0 clients of seed 002 did.
const webConcurrency = 4

// webModes are the two ways a client uses the forward proxy.
var webModes = []string{"get", "connect"}

// Web fetches origin objects of s.WebSizes through every engine's HTTP
// forward proxy, one connection per request: GET with an absolute URI
// (the response body spliced with a byte limit) and a CONNECT tunnel with
// a GET inside (the tunnel spliced both ways). It reports requests/s, CPU
// µs per request (all CPUs and the splicer process) and the median latency.
func Web(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "web"}
	var targets []*Target
	for _, t := range e.Targets {
		switch {
		case t.Peer:
			res.Unavailable = append(res.Unavailable, Missing{t.Name, "web measures splicer's HTTP forward proxy; the lab has no peer forward proxy"})
		case t.Unavailable != "":
			res.Unavailable = append(res.Unavailable, Missing{t.Name, t.Unavailable})
		default:
			targets = append(targets, t)
		}
	}
	dur := pointDuration(s)
	smp := newSamples()
	seen := map[string]map[string]bool{}
	p := newProgress(s.Progress, "web", s.Runs*len(targets)*len(s.WebSizes)*len(webModes))
	for run := 0; run < s.Runs; run++ {
		for _, t := range targets {
			for _, size := range s.WebSizes {
				for _, mode := range webModes {
					p.step(fmt.Sprintf("run %d %s %s %s", run+1, t.Name, mode, sizeLabel(size)))
					r, engines, err := e.webPoint(ctx, t, mode, size, dur)
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					if err != nil {
						res.Notes = append(res.Notes, fmt.Sprintf("run %d %s %s %s: %v", run+1, t.Name, mode, sizeLabel(size), err))
						continue
					}
					addSeen(seen, t.Name+" "+mode, engines)
					addHTTPSamples(smp, t, "web_"+mode, size, r, res)
				}
			}
		}
	}
	p.finish()
	res.Rows = smp.rows(names(targets))
	res.Unavailable = append(res.Unavailable, unmeasured(targets, res.Rows)...)
	res.Notes = append(res.Notes,
		fmt.Sprintf("%d run(s) of about %v per target, mode and object size (the request count is sized from an unmeasured warm-up batch), %d clients at once, a new connection per request (keep-alive off); targets interleaved; cells are median (min–max)", s.Runs, dur, webConcurrency),
		"get: GET http://origin/obj/<size> with an absolute URI to the engine's http-forward listener (cache off); the response body is spliced with a byte limit. connect: CONNECT to the origin's http port, then the GET inside the tunnel, which is spliced both ways; the request time includes the CONNECT",
		"rps: requests per second; cpu_us: every CPU's busy time per request (load generator and origin included); proc_cpu_us: the splicer process's own; p50_ms: median time from sending the request (dial included) to the last body byte",
		"sizes are KiB (1k = 1024 bytes)")
	res.Notes = append(res.Notes, seenNotes(seen)...)
	return withWrkRows(ctx, e, s, res)
}

// withWrkRows adds to res the switch measured by wrk (http-reverse per
// engine beside HAProxy and nginx), or a note saying why it is missing.
func withWrkRows(ctx context.Context, e *Env, s Settings, res *Result) (*Result, error) {
	w, err := SwitchWrk(ctx, e, s)
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		res.Notes = append(res.Notes, "wrk rows: "+err.Error())
		return res, nil
	}
	res.Rows = append(res.Rows, w.Rows...)
	res.Notes = append(res.Notes, w.Notes...)
	for _, m := range w.Unavailable {
		m.Reason = "wrk rows: " + m.Reason
		res.Unavailable = append(res.Unavailable, m)
	}
	return res, nil
}

// pointDuration is how long one size of one target is measured: half the
// bulk window, as web and switch measure many points.
func pointDuration(s Settings) time.Duration { return s.Duration / 2 }

// webPoint measures one mode and size through t's forward proxy and
// returns the engines splicer's metrics counted splices for meanwhile.
func (e *Env) webPoint(ctx context.Context, t *Target, mode string, size int64, dur time.Duration) (HTTPRun, []string, error) {
	obj := "http://" + e.addrs.originAddr(HTTP) + origin.ObjectPath(size)
	dial := loadgen.DialFunc(e.Dial)
	opts := []loadgen.Option{loadgen.WithKeepAlive(false)}
	if mode == "connect" {
		dial = e.connectDial(t.webAddr)
	} else {
		opts = append(opts, loadgen.WithProxy(&url.URL{Scheme: "http", Host: t.webAddr}))
	}
	return e.httpPoint(ctx, t, obj, webConcurrency, dur, dial, opts...)
}

// connectDial opens every connection as a CONNECT tunnel through the forward
// proxy at proxyAddr to the address the HTTP client asked for.
func (e *Env) connectDial(proxyAddr string) loadgen.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := e.Dial(ctx, network, proxyAddr)
		if err != nil {
			return nil, err
		}
		if err := connectTunnel(c, addr); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// connectTunnel asks the proxy on c for a tunnel to addr and reads its
// answer, leaving c at the first byte of the tunnel.
func connectTunnel(c net.Conn, addr string) error {
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Errorf("CONNECT %s: %w", addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CONNECT %s: %s", addr, resp.Status)
	}
	// The origin speaks only when asked, so nothing follows the answer yet;
	// anything that did would be lost with the reader.
	if br.Buffered() > 0 {
		return fmt.Errorf("CONNECT %s: %d unexpected bytes after the answer", addr, br.Buffered())
	}
	return nil
}

// addHTTPSamples records one HTTP point's metrics under prefix and size.
func addHTTPSamples(smp *samples, t *Target, prefix string, size int64, r HTTPRun, res *Result) {
	l := sizeLabel(size)
	smp.add(t.Name, prefix+"_rps_"+l, "req/s", r.RPS)
	smp.add(t.Name, prefix+"_cpu_us_"+l, "µs", r.MachineUSPerReq)
	if len(t.Pids()) > 0 {
		smp.add(t.Name, prefix+"_proc_cpu_us_"+l, "µs", r.ProcUSPerReq)
	}
	smp.add(t.Name, prefix+"_p50_ms_"+l, "ms", r.P50.Seconds()*1e3)
	if r.Errors > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%s %s %s: %d failed request(s), first: %v", t.Name, prefix, l, r.Errors, r.FirstErr))
	}
}

// sizeLabel names an object size in metric names: 64k, 1m.
func sizeLabel(size int64) string {
	if size >= 1<<20 && size%(1<<20) == 0 {
		return strconv.FormatInt(size>>20, 10) + "m"
	}
	return strconv.FormatInt(size>>10, 10) + "k"
}
