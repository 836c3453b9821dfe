// Random keep-alive exchanges through every HTTP kind and, for http-reverse, every in-process engine: every status, header and body byte arrives as the back-end sent it (httprand), clients resetting beside them or not.

package all_test

import (
	"net"
	"testing"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/httpcore/httprand"
)

// randomBackend serves httprand's back-end on loopback.
func randomBackend(tb testing.TB) string {
	tb.Helper()
	return fwdtest.RawBackend(tb, httprand.Serve)
}

// dialer dials addr on loopback for httprand.Run.
func dialer(tb testing.TB, addr string) func() net.Conn {
	return func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			tb.Fatal(err)
		}
		return c
	}
}

// TestRandomExchangesArriveIntact: seeded random sequences of keep-alive
// exchanges (GET, HEAD, POST with a length or chunked; answers with a
// length, chunked or ending at close; 204 and 304; bodies from 0 to 3 MiB;
// requests written in parts, some pipelined) through http-reverse, for
// every in-process engine and auto: each answer arrives with its status,
// the back-end's header and every body byte, and some bodies moved
// through the engine. SPLICER_RANDOM_SEEDS=N runs N seeds instead of 4.
func TestRandomExchangesArriveIntact(t *testing.T) {
	forEachEngine(t, randomBackend(t), func(t *testing.T, f *forwarder.Forwarder, engine string) {
		for seed := range uint64(httprand.Seeds()) {
			httprand.Run(t, dialer(t, f.Addr("rev").String()), "", seed, 24)
		}
		if n := fwdtest.Metric(f, "splicer_http_response_bytes_total", "listener", "rev", "way", "spliced"); n == 0 {
			t.Errorf("no body moved through engine %s: the test did not reach it", engine)
		}
	})
}

// forEachEngine runs test on a fresh http-reverse listener in front of up,
// for every in-process engine and auto.
func forEachEngine(t *testing.T, up string, test func(t *testing.T, f *forwarder.Forwarder, engine string)) {
	for _, engine := range []string{"copy", "pipe", "sockmap", "auto"} {
		t.Run(engine, func(t *testing.T) {
			if engine == "sockmap" {
				testenv.RequireRoot(t)
			}
			test(t, fwdtest.ReverseProxy(t, engine, "", up), engine)
		})
	}
}

// TestRandomExchangesEveryHTTPKind: the same through http-forward (the
// back-end named in absolute form) and filter, with their default engine.
func TestRandomExchangesEveryHTTPKind(t *testing.T) {
	forEachHTTPKind(t, func(t *testing.T, addr, origin string) {
		for seed := range uint64(httprand.Seeds()) {
			httprand.Run(t, dialer(t, addr), origin, seed, 24)
		}
	})
}

// forEachHTTPKind runs test on the http-forward and filter listeners of
// one forwarder in front of httprand's back-end: addr is the listener's,
// origin the back-end as http-forward's clients name it (absolute form),
// empty for filter.
func forEachHTTPKind(t *testing.T, test func(t *testing.T, addr, origin string)) {
	up := randomBackend(t)
	f := fwdtest.Start(t, fwdtest.HTTPListeners(t, up)...)
	for _, kind := range []string{"http-forward", "filter"} {
		t.Run(kind, func(t *testing.T) {
			origin := ""
			if kind == "http-forward" {
				origin = up
			}
			test(t, f.Addr(kind).String(), origin)
		})
	}
}

// TestRandomAbortsReachNoOtherClient: through http-reverse, for every
// in-process engine and auto, clients that reset their connection at a
// random point of an exchange (partway through the request, with it sent,
// partway through the answer) run beside clients whose exchanges must
// arrive intact. The proxy keeps idle upstream connections for any
// client: one left with part of a request or an answer must never serve
// another.
func TestRandomAbortsReachNoOtherClient(t *testing.T) {
	forEachEngine(t, randomBackend(t), func(t *testing.T, f *forwarder.Forwarder, _ string) {
		httprand.RunBesideAborts(t, dialTo(f.Addr("rev").String()), "", 16, 6)
	})
}

// TestRandomAbortsEveryHTTPKind: the same through http-forward (the
// back-end named in absolute form) and filter, with their default engine.
func TestRandomAbortsEveryHTTPKind(t *testing.T) {
	forEachHTTPKind(t, func(t *testing.T, addr, origin string) {
		httprand.RunBesideAborts(t, dialTo(addr), origin, 16, 6)
	})
}

// dialTo is dialer for addr, failing the test it is given.
func dialTo(addr string) func(tb testing.TB) func() net.Conn {
	return func(tb testing.TB) func() net.Conn { return dialer(tb, addr) }
}
