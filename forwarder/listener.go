// One listener: accept loop, connection limit, and the life of each pair from accept to close.

package forwarder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/proxy"
	proxyall "github.com/splicer/splicer/proxy/all"
	"github.com/splicer/splicer/proxy/httpcore"
)

type listener struct {
	f     *Forwarder
	cfg   config.Listener
	proxy proxy.Proxy
	chain []engine.Engine
	// entry is the engine auto starts pairs on before promoting them to
	// chain[0] (all.Set.Start), at promote; nil when pairs start on
	// chain[0].
	entry   engine.Engine
	promote engine.Promotion
	// promotedNotes are what /flows says of a pair promoted by time and
	// by bytes (promotedNote): made once, not a string per pair.
	promotedNotes [2]string
	// matchMSS: upstream connections announce the client's MSS (see
	// session.withClientMSS), because the chain holds engine ip.
	matchMSS bool
	// ports hands out the local ports of upstream connections (see
	// session.Dial), when an engine owns a range (ip): every listener
	// dials from it, so that the ports it takes out of the kernel's range
	// are not lost to listeners without that engine.
	ports engine.UpstreamPorts
	// clockLate: the listener's pairs tell ports what it needs to splice
	// their upstream only before a splice by another engine than copy
	// (session.beforeDeepSplice), which most of them never have: its
	// proxy closes the upstream with the pair (tcp), never pooling it
	// for another pair, whose splice would not tell.
	clockLate bool
	// rcvBuf bounds the upstream connections' receive buffers (bytes), 0
	// for the kernel's autotuning: upstreamRcvBuf.
	rcvBuf int
	log    *slog.Logger
	ln     net.Listener
	// quietAccept: ln accepts without Go's keepalive (listenQuiet);
	// keepAccepted: an accepted connection needs tcp_keepalive set of its
	// own (setListenerKeepAlive).
	quietAccept, keepAccepted bool
	active                    atomic.Int64
	access                    *access
	// proxied reads a PROXY protocol header off accepted connections
	// (accept_proxy_protocol); nil for none.
	proxied *proxyAccept
	nextID  *atomic.Uint64
	// codes caches the listener's HTTP status counters (1xx..5xx), so a
	// request does not pay a label lookup.
	codes [len(statusClasses)]atomic.Pointer[prometheus.Counter]
	// ways caches its response byte counters, by way (responseWays).
	ways [len(responseWays)]atomic.Pointer[prometheus.Counter]
	// requestSeconds caches its request-duration histogram.
	requestSeconds atomic.Pointer[prometheus.Observer]
	life           lifecycle
	// countDenied counts a dial the destination rules refused: made once,
	// not a closure per dial.
	countDenied func()
}

var pairIDs atomic.Uint64

func newListener(f *Forwarder, lc config.Listener) (*listener, error) {
	chain, err := f.engines.Chain(lc.Engine)
	if err != nil {
		return nil, err
	}
	if len(chain) == 0 {
		return nil, errors.New("no engine can run on this host")
	}
	p, err := proxyall.New(lc, proxyall.Deps{Dial: f.dial, Log: f.log.With("listener", lc.Name), CopyBelow: copyBelow(chain)})
	if err != nil {
		return nil, err
	}
	acc, err := newAccess(f, lc)
	if err != nil {
		return nil, err
	}
	proxied, err := newProxyAccept(lc)
	if err != nil {
		return nil, err
	}
	l := &listener{f: f, cfg: lc, proxy: p, chain: chain, nextID: &pairIDs, access: acc, proxied: proxied,
		matchMSS: needsMatchedMSS(chain), ports: upstreamPorts(f.engines.Engines), log: f.log.With("listener", lc.Name)}
	l.countDenied = func() { f.metrics.DestinationsDenied.WithLabelValues(lc.Name).Inc() }
	l.rcvBuf = upstreamRcvBuf(lc, l.matchMSS)
	l.clockLate = lc.Proxy == "tcp"
	if lc.Promote.On() {
		l.entry = f.engines.Start(lc.Engine, chain)
		l.promote = engine.Promotion{Bytes: int64(lc.Promote.AfterBytes), After: lc.Promote.After.Std()}
		if l.entry != nil {
			from := "promoted from " + l.entry.Name() + ": "
			l.promotedNotes = [2]string{from + "open " + l.promote.After.String(),
				from + "moved " + strconv.FormatInt(l.promote.Bytes, 10) + " bytes"}
		}
	}
	l.life = newLifecycle(f.hard)
	if want := lc.Engine; want != "auto" && want != "" && chain[0].Name() != want {
		reason := f.engines.Reason(want)
		if reason == "" {
			reason = "not built into this binary yet"
		}
		l.log.Warn("engine unavailable, falling back", "engine", want, "using", chain[0].Name(), "reason", reason)
		f.metrics.Fallbacks.WithLabelValues(want, chain[0].Name(), "unavailable").Inc()
	}
	return l, nil
}

// needsMatchedMSS reports whether chain holds an engine that passes
// segments between the two connections unchanged in size (engine.
// SegmentRelay): it splices a pair only if neither side may send larger
// segments than the other side accepts.
func needsMatchedMSS(chain []engine.Engine) bool {
	for _, e := range chain {
		if r, ok := e.(engine.SegmentRelay); ok && r.RelaysSegments() {
			return true
		}
	}
	return false
}

// copyBelow is the largest response body http-reverse copies itself
// (proxyall.Deps.CopyBelow): 0, its default, unless an engine of chain
// splices shorter bodies with gain (engine.MinLimited: ip with a lower
// min_body), which then gets every body from its floor, but never below
// what every HTTP proxy copies (httpcore.DefaultCopyBelow).
func copyBelow(chain []engine.Engine) int64 {
	var c int64
	for _, e := range chain {
		m, ok := e.(engine.MinLimited)
		if !ok {
			continue
		}
		declined := m.MinLimit() - 1 // the longest body the engine declines
		if declined >= httpcore.ReverseCopyBelow {
			continue
		}
		if bound := max(declined, httpcore.DefaultCopyBelow); c == 0 || bound < c {
			c = bound
		}
	}
	return c
}

// upstreamPorts is the engine that hands out the local ports of upstream
// connections (engine.UpstreamPorts), or nil.
func upstreamPorts(engines []engine.Engine) engine.UpstreamPorts {
	for _, e := range engines {
		if p, ok := e.(engine.UpstreamPorts); ok {
			return p
		}
	}
	return nil
}

// upstreamRcvBuf is the receive buffer of an http-reverse listener's
// upstream connections (config.UpstreamPool.ReceiveBuffer): as
// configured, or by default bounded where engine ip may splice the
// bodies (relays, as for matchMSS), so that a pooled connection's window
// stays one a client connection takes. Other kinds splice their
// upstreams until the end, or dial one per request: 0, the kernel's
// autotuning.
func upstreamRcvBuf(lc config.Listener, relays bool) int {
	if lc.Proxy != "http-reverse" {
		return 0
	}
	if b := lc.UpstreamPool.WithDefaults().ReceiveBuffer; b != nil {
		return int(*b)
	}
	if relays {
		return int(config.DefaultPoolReceiveBuffer)
	}
	return 0
}

// controlEngine is the chain's control-mode engine (engine.ControlMode),
// or its shallowest.
func controlEngine(chain []engine.Engine) engine.Engine {
	for _, e := range chain {
		if c, ok := e.(engine.ControlMode); ok && c.ControlMode() {
			return e
		}
	}
	return chain[len(chain)-1]
}

// clientMSS is the MSS the client announced, when the listener's chain
// holds an engine that needs the upstream to announce it too (see
// listener.matchMSS), or 0. It is read once, from the freshly accepted
// socket: a socket that engine ip rebuilt after unsplicing reports a
// smaller MSS than its handshake's, and a proxy may dial again after that
// (http-reverse, for the next request's server).
func (l *listener) clientMSS(c *net.TCPConn, s *session) int {
	if !l.matchMSS {
		return 0
	}
	mss, err := sockopt.AnnouncedMSS(c)
	if err != nil {
		s.Log().Debug("client's MSS unknown: upstream connections announce the route's", "err", err)
		return 0
	}
	return mss
}

func (l *listener) bind() error {
	var ln net.Listener
	var err error
	if l.f.inherit != nil {
		if ln, err = l.f.inherit(l.cfg.Name, l.cfg.Listen); err != nil {
			return err
		}
	}
	quiet := false
	if ln == nil {
		if ln, err = l.f.listen("tcp", l.cfg.Listen); err != nil {
			return err
		}
		quiet = l.f.quietListen
	}
	l.ln = ln
	l.setListenerKeepAlive(quiet)
	l.log.Info("listening", append([]any{"addr", ln.Addr().String(), "proxy", l.cfg.Proxy}, l.engineAttrs()...)...)
	return nil
}

// engineAttrs names the engine the listener's pairs start on and, with
// promotion, the one they move to and when.
func (l *listener) engineAttrs() []any {
	if l.entry == nil {
		return []any{"engine", l.chain[0].Name()}
	}
	return []any{"engine", l.entry.Name(), "promote_to", l.chain[0].Name(), "promote", l.cfg.Promote.String()}
}

func (l *listener) close() {
	if l.ln != nil {
		l.ln.Close()
	}
}

// closeProxy releases what the proxy holds in the background (health
// checks, caches), once no pair uses it any more.
func (l *listener) closeProxy() {
	l.life.release.Do(func() {
		if c, ok := l.proxy.(io.Closer); ok {
			c.Close()
		}
	})
}

// start runs the accept loop in the background.
func (l *listener) start() {
	l.life.started.Store(true)
	go l.serve()
}

// serve accepts until the listener is closed. Accept errors other than
// closing (e.g. out of file descriptors) are logged and retried after a
// short pause rather than ending the listener.
func (l *listener) serve() {
	defer close(l.life.served)
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.life.handingOver() {
				return
			}
			l.log.Error("accept failed", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		l.f.series.accepted.Get(l.cfg.Name).Inc()
		tc, ok := c.(*net.TCPConn)
		if !ok {
			c.Close()
			continue
		}
		if limit := l.cfg.MaxConnections; limit > 0 && l.active.Load() >= int64(limit) {
			// Past max_connections the connection is accepted and closed
			// at once, so the client learns immediately instead of
			// waiting in the accept queue.
			l.refuse(tc, "max_connections")
			continue
		}
		if l.proxied != nil {
			l.enter()
			go l.acceptProxied(tc)
			continue
		}
		ip, refused := l.access.admit(tc.RemoteAddr())
		if refused != "" {
			l.refuse(tc, refused)
			continue
		}
		l.enter()
		go l.handle(tc, ip, origin{})
	}
}

// enter counts a new pair, which leave (or finish) uncounts.
func (l *listener) enter() {
	l.active.Add(1)
	l.f.pairs.Add(1)
	l.life.pairs.Add(1)
}

// leave uncounts a pair that entered and was refused before it started.
func (l *listener) leave() {
	l.active.Add(-1)
	l.f.pairs.Done()
	l.life.pairs.Done()
}

// serveProxy runs the proxy on the pair; a panic ends only this pair,
// logged with its stack and counted (reason panic), not the process.
func (l *listener) serveProxy(s *session) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.Log().Error("panic in a pair's proxy: pair closed", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = errPanic
		}
	}()
	return l.proxy.Serve(l.life.hard, s)
}

// errPanic is how a pair whose proxy panicked ends.
var errPanic = errors.New("panic")

// httpResponses is the counter of the listener's answers with status.
func (l *listener) httpResponses(status int) prometheus.Counter {
	class := min(max(status/100, 0), 5)
	return cachedCounter(&l.codes[class], l.f.metrics.HTTPResponses, l.cfg.Name, statusClasses[class])
}

// observeRequest adds an answered request's duration to the listener's
// histogram, looked up once and kept, as the status counters are.
func (l *listener) observeRequest(d time.Duration) {
	h := l.requestSeconds.Load()
	if h == nil {
		o := l.f.metrics.HTTPRequestSeconds.WithLabelValues(l.cfg.Name)
		h = &o
		l.requestSeconds.Store(h)
	}
	(*h).Observe(d.Seconds())
}

// statusClasses label splicer_http_responses_total's code by status/100.
var statusClasses = [...]string{"0xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

// cachedCounter is vec's counter with labels, looked up once and kept in
// slot, so that a request does not pay a label lookup.
func cachedCounter(slot *atomic.Pointer[prometheus.Counter], vec *prometheus.CounterVec, labels ...string) prometheus.Counter {
	if c := slot.Load(); c != nil {
		return *c
	}
	c := vec.WithLabelValues(labels...)
	slot.Store(&c)
	return c
}

// responseWays are the ways an HTTP answer's bytes move, as
// splicer_http_response_bytes_total names them.
var responseWays = [...]string{"copied", "kernel", "spliced"}

// addResponseBytes counts an answer's bytes by the way they moved: r's
// Kernel and Spliced, and the rest of its Bytes copied.
func (l *listener) addResponseBytes(r proxy.Request) {
	copied := max(r.Bytes-r.Kernel-r.Spliced, 0)
	for i, n := range [len(responseWays)]int64{copied, r.Kernel, r.Spliced} {
		if n > 0 {
			cachedCounter(&l.ways[i], l.f.metrics.HTTPResponseBytes, l.cfg.Name, responseWays[i]).Add(float64(n))
		}
	}
}

// refuse closes a connection the listener will not serve, counting why. It
// logs at debug only: a flood of refusals must not flood the log too.
func (l *listener) refuse(c *net.TCPConn, reason string) {
	l.f.series.closed.Get(l.cfg.Name).Get(reason).Inc()
	l.log.Debug("connection refused", "client", c.RemoteAddr().String(), "reason", reason)
	c.Close()
}

// handle runs one pair from accept to close, or until the proxy returns
// from a pair its engine follows on its own (detached: OnEnd closes it).
// ip is what the per-client cap counts the client by (clientKey); o, the
// client a trusted balancer's PROXY protocol header named, if any.
func (l *listener) handle(c *net.TCPConn, ip netip.Addr, o origin) {
	m := l.f.series
	l.keepAcceptedConn(c)
	p := engine.NewPair(l.nextID.Add(1), l.cfg.Name, c)
	if o.client != nil {
		p.SetOrigin(o.client, o.local)
	}
	s := &session{l: l, p: p, clientIP: ip}
	s.clientMSS = int32(l.clientMSS(c, s))
	l.f.flows.add(p)
	m.active.Get(l.cfg.Name).Inc()

	err := l.serveProxy(s)
	if s.detached && !errors.Is(err, errPanic) {
		s.arrive()
		return
	}
	l.finish(s, err)
}

// finish closes a pair whose proxy returned err (or, detached, whose
// engine reported its end) and counts and logs it.
func (l *listener) finish(s *session, err error) {
	defer l.f.pairs.Done()
	defer l.life.pairs.Done()
	defer l.active.Add(-1)
	defer l.access.release(s.clientIP)
	if s.detached {
		l.f.gc.add(-1)
	}
	m, p := l.f.series, s.p
	p.SetState(engine.StateClosing)
	reason := proxy.CloseReason(err)
	if errors.Is(err, errPanic) {
		reason = "panic"
	}
	s.settleKeepAlives(p.Upstream())
	p.CloseConns()
	if s.atEnd != nil {
		s.atEnd()
	}
	l.f.flows.remove(p)
	m.active.Get(l.cfg.Name).Dec()
	m.closed.Get(l.cfg.Name).Get(reason).Inc()
	m.pairSeconds.Get(l.cfg.Name).Observe(uptime(p.Created))
	l.logClosed(s, reason, err)
	l.logPair(p, reason, err)
}

// logClosed writes the pair's closing line to the daemon's log: at info
// without an access log, at debug with one, which is then the per-pair
// record (accessLine), so that the daemon's log keeps to events and a
// churn of short connections does not write it a line each.
func (l *listener) logClosed(s *session, reason string, err error) {
	level := slog.LevelInfo
	if l.f.access != nil || l.f.accessLog != nil {
		level = slog.LevelDebug
	}
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	p := s.p
	name, _ := p.Engine()
	attrs := []any{"reason", reason, "engine", name, "bytes_up", p.Bytes(engine.Up),
		"bytes_down", p.Bytes(engine.Down), "duration_s", uptime(p.Created)}
	if err != nil && reason != "eof" {
		attrs = append(attrs, "err", err.Error())
	}
	log := s.Log()
	if s.detached {
		log = l.log.With("pair", p.ID, "client", p.ClientAddr().String(), "upstream", upstreamOf(p))
	}
	log.Log(ctx, level, "pair closed", attrs...)
}
