// session implements proxy.Session: dialling the upstream, splicing with fallback down the engine ladder, control-mode forwarding.

package forwarder

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/proxy"
)

type session struct {
	l *listener
	p *engine.Pair
	// log is the pair's logger, made for its first line (Log), which
	// most pairs never write: the listener's with the pair's ID, its
	// client and its upstream (logUp: a proxy that dials per request,
	// http-reverse, names only the latest upstream in its lines).
	logMu sync.Mutex
	log   *slog.Logger
	logUp any // nil before any upstream
	// clientIP is what the per-client cap counts the client by (its
	// address, or its IPv6 /64: clientKey).
	clientIP netip.Addr
	// clientMSS is what upstream SYNs announce, 0 for the route's MSS.
	clientMSS int32
	// detached: the engine follows the pair on its own (EndDetached) and
	// reports its end to OnEnd. The pair is over once both the proxy has
	// returned and the engine has reported (arrive); end is the Result,
	// set when it comes (a detached pair's session lasts its life, so it
	// keeps a pointer, not the Result's 48 bytes).
	arrived  atomic.Int32
	detached bool
	// promoting: the pair passed its promotion thresholds, and the
	// first engine of the chain to take it counts the promotion.
	promoting atomic.Bool
	end       *engine.Result
	// atEnd is what the proxy asked to call once the pair has ended
	// (AtEnd), its functions in the order given.
	atEnd func()
	// keep is the latest upstream connection whose keepalive is still
	// to be set (listener.keepAliveDialed), with its timer; a pair that
	// dials again has the earlier one's set at once.
	keep pendingKeep
	// unclocked is the upstream connection dialled from the engine's
	// port range whose engine has not been told it is to be spliced
	// (engine.LateUpstreamPorts): beforeDeepSplice tells it.
	unclocked *net.TCPConn
}

// beforeDeepSplice readies the pair for an engine other than the
// forwarder's own copy, which copies as the proxy would: the keepalive
// is set on upstream connections that wait for it, and the engine that
// handed out the upstream's port learns what it needs to splice it.
func (s *session) beforeDeepSplice() {
	s.settleKeepAlives(nil)
	if c := s.unclocked; c != nil {
		s.unclocked = nil
		if c == s.p.Upstream() {
			s.l.ports.(engine.LateUpstreamPorts).UpstreamSplicing(c)
		}
	}
}

// pendingKeep is an upstream connection whose keepalive its timer sets.
type pendingKeep struct {
	c *net.TCPConn
	t *time.Timer
}

// settleKeepAlives sets now the keepalive of the upstream connection
// whose timer has not fired yet, and forgets it. unless, if set, is a
// connection that is about to close: its timer is only stopped. The
// keepalive is set at once before an engine other than the forwarder's
// own copy takes the pair (its sockets are then the engine's), and when
// the pair ends for a connection it gave to a pool.
func (s *session) settleKeepAlives(unless *net.TCPConn) {
	if k := s.keep; k.t != nil {
		s.keep = pendingKeep{}
		if k.t.Stop() && k.c != unless {
			s.l.keepAliveOpen(k.c)
		}
	}
}

// arrive is called once when the proxy has returned from a detached
// pair, and once when the engine reports its end: the second closes the
// pair, counted and logged by how it ended.
func (s *session) arrive() {
	if s.arrived.Add(1) == 2 {
		var r engine.Result
		if s.end != nil {
			r = *s.end
		}
		s.l.finish(s, proxy.EndErr(r))
	}
}

// AtEnd implements proxy.Session: finish calls f. The proxy's goroutine
// calls AtEnd, and finish runs after the proxy returned.
func (s *session) AtEnd(f func()) {
	if prev, next := s.atEnd, f; prev != nil {
		f = func() { prev(); next() }
	}
	s.atEnd = f
}

func (s *session) Pair() *engine.Pair { return s.p }

// Log implements proxy.Session: the pair's logger, made once it is asked
// for and again after each new upstream.
func (s *session) Log() *slog.Logger {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if s.log == nil {
		s.log = pairLogger(s.l.log, s.p, s.logUp)
	}
	return s.log
}

// logUpstream has the pair's lines name up as its upstream from now on.
func (s *session) logUpstream(up any) {
	s.logMu.Lock()
	s.logUp, s.log = up, nil
	s.logMu.Unlock()
}

// Dial connects to addr within the listener's connect timeout.
func (s *session) Dial(ctx context.Context, addr string) (*net.TCPConn, error) {
	if t := s.l.cfg.ConnectTimeout.Std(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	ctx, err := s.l.access.guardDial(ctx, addr, s.l.countDenied)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ctx = sockopt.WithRcvBuf(s.withClientMSS(ctx), s.l.rcvBuf)
	var c net.Conn
	if s.l.ports == nil {
		c, err = s.l.f.dial(ctx, "tcp", addr)
	} else {
		c, err = s.dialFromRange(ctx, addr)
	}
	s.l.f.series.connectSeconds.Get(s.l.cfg.Name).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, classifyDial(ctx, err)
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, errors.New("upstream connection is not TCP")
	}
	if t := s.l.keepAliveDialed(tc); t != nil {
		s.settleKeepAlives(nil)
		s.keep = pendingKeep{c: tc, t: t}
	}
	s.p.SetUpstream(tc)
	s.logUpstream(addr)
	return tc, nil
}

// portTries bounds the dials from the engine's port range: each failure
// (EADDRNOTAVAIL: the 4-tuple is in use, by a socket or a TIME_WAIT the
// kernel keeps) moves on to the next port.
const portTries = 16

// portWait bounds how long a dial waits for a local port when the
// range's and the kernel's toward the server are all in use, and
// portPause the pauses between its tries, doubled up to portPauseMax.
// Engine ip holds the port of every pair in its TIME_WAIT, which the
// kernel knows nothing of: a range port whose pair has been quiet a
// second is taken again (its portreuse.go), a kernel port only once the
// pair leaves the table. At more new pairs a second than the range
// carries, the kernel's ports run out too; a dial that failed then would
// close the client's connection with its first bytes unread, which
// resets it, where a range port was a moment away. Variables: tests
// shorten them.
var (
	portWait     = 2 * time.Second
	portPause    = 10 * time.Millisecond
	portPauseMax = 200 * time.Millisecond
)

// dialFromRange dials addr from a local port the engine hands out
// (engine.UpstreamPorts, dialRangeOnce), waiting up to portWait for one
// while every port toward addr is in use.
func (s *session) dialFromRange(ctx context.Context, addr string) (net.Conn, error) {
	deadline := time.Now().Add(portWait)
	pause := portPause
	for {
		c, err := s.dialRangeOnce(ctx, addr)
		if err == nil || !sockopt.IsPortInUse(err) || time.Now().Add(pause).After(deadline) {
			return c, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		pause = min(2*pause, portPauseMax)
	}
}

// dialRangeOnce dials addr from a local port the engine hands out
// (engine.UpstreamPorts): a port whose pair the engine still forwards
// without a socket goes to no new connection to the same server. When
// the range's ports toward addr are taken, the kernel picks one from
// what is left of its own range, so the reservation takes no ports away
// from the forwarder's connections. If even that port is in use, the
// dial fails there: the engine had no port of the range to give, and
// each further try would only have the kernel search its range again.
// Every port handed out is accounted for (engine.SettlePicks): the connection
// keeps the one it left from, the others go back.
func (s *session) dialRangeOnce(ctx context.Context, addr string) (net.Conn, error) {
	var refused atomic.Bool // a dial took a kernel port: the range had none
	var mu sync.Mutex       // a dual-stack dial binds from two goroutines
	var picks []sockopt.Pick
	inRange := sockopt.WithLocalPort(ctx, func(server netip.AddrPort) (uint16, bool) {
		p, ok := s.l.ports.UpstreamPort(server)
		if !ok {
			refused.Store(true)
			return p, ok
		}
		mu.Lock()
		picks = append(picks, sockopt.Pick{Server: server, Port: p})
		mu.Unlock()
		return p, ok
	})
	for range portTries {
		c, err := s.l.f.dial(inRange, "tcp", addr)
		mu.Lock()
		s.settlePicks(picks, c)
		picks = picks[:0]
		mu.Unlock()
		if err == nil || !sockopt.IsPortInUse(err) || ctx.Err() != nil || refused.Load() {
			return c, err
		}
	}
	return s.l.f.dial(ctx, "tcp", addr)
}

// settlePicks tells the engine what became of the ports it handed out
// for a dial (engine.SettlePicks), leaving out what it needs only to
// splice c where the listener lets it (listener.clockLate): the session
// then tells it before a splice (beforeDeepSplice).
func (s *session) settlePicks(picks []sockopt.Pick, c net.Conn) {
	if !s.l.clockLate || c == nil || !engine.SettlePicksLate(s.l.ports, picks, c) {
		engine.SettlePicks(s.l.ports, picks, c)
		return
	}
	s.unclocked, _ = c.(*net.TCPConn)
}

// AdoptUpstream implements proxy.UpstreamAdopter: c, dialled for another
// pair of the listener, is the pair's upstream now.
func (s *session) AdoptUpstream(c *net.TCPConn) {
	s.p.SetUpstream(c)
	s.logUpstream(addrValue{c.RemoteAddr()})
}

// DialClass is what proxy.DialClass reports: the client's MSS that the
// pair's upstream connections announce, if they do.
func (s *session) DialClass() string {
	if s.clientMSS == 0 {
		return ""
	}
	return "mss=" + strconv.Itoa(int(s.clientMSS))
}

// withClientMSS has the upstream's SYN announce the client's MSS (see
// clientMSS), if known: the server then never sends a segment larger
// than the client accepts. The client's own segments toward a server that
// accepts less cannot be bounded this way (the client's handshake is
// over); engine ip declines such pairs, saying so.
func (s *session) withClientMSS(ctx context.Context) context.Context {
	if s.clientMSS == 0 {
		return ctx
	}
	return sockopt.WithMSS(ctx, int(s.clientMSS))
}

// classifyDial wraps a dial error with the proxy error that names its cause.
func classifyDial(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, proxy.ErrDestinationDenied):
		return err
	case errors.Is(err, syscall.ECONNREFUSED):
		return errors.Join(proxy.ErrUpstreamRefused, err)
	case errors.Is(err, syscall.ECONNRESET):
		return errors.Join(proxy.ErrUpstreamReset, err)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return errors.Join(proxy.ErrUpstreamUnreachable, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return err
		}
		return errors.Join(proxy.ErrUpstreamTimeout, err)
	}
	return err
}

// Splice splices the pair with the listener's engines (spliceChain).
// With promotion (engine auto where ip can run), a pair spliced until it
// closes starts on the entry engine (copy) instead, and goes to the chain
// only once it has moved or lived enough to pay back the chain's first
// engine's splice: short pairs never touch ip.
func (s *session) Splice(ctx context.Context, opts engine.Options) (engine.Result, error) {
	at, ok := s.promotion(opts)
	if !ok {
		return s.spliceChain(ctx, s.l.chain, opts, "")
	}
	entry := opts
	entry.Promote = at
	first, err := s.spliceChain(ctx, []engine.Engine{s.l.entry}, entry, "")
	if err != nil || first.End != engine.EndPromote {
		return first, err
	}
	rest := opts
	rest.OnSpliced = nil // called once, by the entry engine
	chain, note := s.l.chain, s.promotedNote(first, at)
	if first.EOF[engine.Up] || first.EOF[engine.Down] {
		// Half closed: ending, and ip takes no pair with a direction
		// held; the entry engine carries it to the end.
		rest.Up.Mode, rest.Down.Mode = held(first, engine.Up), held(first, engine.Down)
		chain, note = []engine.Engine{s.l.entry}, ""
	} else {
		s.promoting.Store(true)
	}
	res, err := s.spliceChain(ctx, chain, rest, note)
	s.promoting.Store(false)
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		res.Moved[d] += first.Moved[d]
		res.EOF[d] = res.EOF[d] || first.EOF[d]
	}
	return res, err
}

// promotion is when a splice of the pair on the entry engine ends for the
// chain, counted from where the pair is (its bytes and age): false when
// the pair starts on the chain, because the listener has no entry
// engine, the splice is not until the pair closes (byte limits, watched
// directions, timers: HTTP bodies have engines.ip.min_body), or the pair
// already passed a threshold.
func (s *session) promotion(opts engine.Options) (engine.Promotion, bool) {
	if s.l.entry == nil || opts.HasLimits() || opts.HasWatch() || opts.For > 0 || opts.Promote.On() ||
		opts.Up.Mode != engine.Forward || opts.Down.Mode != engine.Forward {
		return engine.Promotion{}, false
	}
	limit := s.l.promote
	at := engine.Promotion{}
	if limit.Bytes > 0 {
		if at.Bytes = limit.Bytes - s.p.Bytes(engine.Up) - s.p.Bytes(engine.Down); at.Bytes <= 0 {
			return engine.Promotion{}, false
		}
	}
	if limit.After > 0 {
		if at.After = limit.After - time.Since(s.p.Created); at.After <= 0 {
			return engine.Promotion{}, false
		}
	}
	return at, true
}

// promotedNote is what /flows and the access log say of a promoted pair:
// which threshold it passed.
func (s *session) promotedNote(first engine.Result, at engine.Promotion) string {
	if at.Bytes > 0 && first.Moved[engine.Up]+first.Moved[engine.Down] >= at.Bytes {
		return s.l.promotedNotes[1]
	}
	return s.l.promotedNotes[0]
}

// held is the mode of direction d after a splice that ended with r: a
// direction whose FIN was forwarded is held, not spliced again.
func held(r engine.Result, d engine.Direction) engine.Mode {
	if r.EOF[d] {
		return engine.Hold
	}
	return engine.Forward
}

// spliceChain tries chain's engines in order, falling back when one
// declines the pair, and records the outcome. note is what /flows says of
// the first engine's splice.
func (s *session) spliceChain(ctx context.Context, chain []engine.Engine, opts engine.Options, note string) (engine.Result, error) {
	m := s.l.f.series
	for i, e := range chain {
		if err := e.Supports(s.p, opts); err != nil {
			note = s.fallback(e, chain, i, err)
			continue
		}
		deep := true
		if c, ok := e.(engine.ControlMode); ok && c.ControlMode() {
			deep = false
		} else {
			s.beforeDeepSplice()
		}
		s.p.SetPending(e.Name(), note)
		res, err := e.Splice(ctx, s.p, s.markSpliced(e.Name(), opts, deep))
		if err == nil && res.End == engine.EndDetached {
			// OnEnd counts it and ends the pair.
			s.p.CommitEngine()
			s.detached = true
			s.l.f.gc.add(1)
			// Its logger, with the pair's fields formatted, would stay
			// for the pair's life: finish makes the closing line's.
			s.logMu.Lock()
			s.log = s.l.log
			s.logMu.Unlock()
			return res, nil
		}
		m.spliced.Get(e.Name()).Dec()
		if engine.IsFallback(err) {
			s.p.SetState(engine.StateControl)
			note = s.fallback(e, chain, i, err)
			continue
		}
		s.p.CommitEngine()
		if err != nil {
			m.splices.Get(e.Name()).Get("error").Inc()
			return res, err
		}
		m.splices.Get(e.Name()).Get(res.End.String()).Inc()
		if res.End.KeepsPair() {
			s.p.SetState(engine.StateControl)
		}
		return res, nil
	}
	return engine.Result{}, errors.New("no engine could splice the pair")
}

// markSpliced wraps opts.OnSpliced so that /flows shows the pair spliced
// only once forwarding is in place: until then the engine may still
// decline the pair (and fall back), and the pair stays in state control.
// It shows the pair draining while the engine says so (OnDraining), and
// sets OnDetached to close the pair's sockets when the engine lets go of
// them: the forwarder makes every state change and closes every socket.
// OnEnd lets an engine follow a pair on its own (EndDetached): the
// proxy's goroutine and buffers go, and the pair is closed, counted and
// logged when the engine reports its end. Those three are set for deep
// engines only: the control-mode engine (copy) copies as the proxy does,
// never drains, detaches nor ends on its own, and a churn of short pairs
// pays no closures for them.
func (s *session) markSpliced(name string, opts engine.Options, deep bool) engine.Options {
	inner := opts.OnSpliced
	s.l.f.series.spliced.Get(name).Inc()
	start := time.Now()
	opts.OnSpliced = func() {
		s.l.f.series.spliceSeconds.Get(name).Observe(time.Since(start).Seconds())
		if s.promoting.CompareAndSwap(true, false) {
			s.l.f.metrics.Promotions.WithLabelValues(s.l.cfg.Name, name).Inc()
		}
		s.p.MarkSpliced()
		if inner != nil {
			inner()
		}
	}
	if !deep {
		return opts
	}
	opts.OnDraining = func(draining bool) {
		if draining {
			s.p.SetState(engine.StateDraining)
		} else {
			s.p.SetState(engine.StateSpliced)
		}
	}
	opts.OnDetached = func() {
		if err := s.p.CloseConns(); err != nil {
			s.Log().Debug("closing the sockets an engine detached", "err", err)
		}
		// Closed, the connections are only memory now; the pair keeps
		// their addresses for /flows and the logs.
		s.p.SetUpstream(nil)
		s.p.ForgetConns()
	}
	opts.OnEnd = func(r engine.Result) {
		s.l.f.series.spliced.Get(name).Dec()
		s.l.f.series.splices.Get(name).Get(r.End.String()).Inc()
		s.end = &r
		s.arrive()
	}
	return opts
}

// fallback logs and counts that chain[i] declined the pair, returning the
// note /flows shows for the engine that takes over.
func (s *session) fallback(e engine.Engine, chain []engine.Engine, i int, err error) string {
	to := "none"
	if i+1 < len(chain) {
		to = chain[i+1].Name()
	}
	var fe *engine.FallbackError
	reason := err.Error()
	if errors.As(err, &fe) {
		reason = fe.Reason
	}
	// Debug: declines are routine (a body too short for ip, or already
	// whole in the forwarder's queue: one per request on some sites);
	// splicer_fallbacks_total counts them and /flows shows the last one.
	s.Log().Debug("engine declined pair, falling back", "engine", e.Name(), "to", to, "reason", reason)
	s.l.f.metrics.Fallbacks.WithLabelValues(e.Name(), to, "declined").Inc()
	s.l.f.metrics.Splices.WithLabelValues(e.Name(), "fallback").Inc()
	return "fallback from " + e.Name() + ": " + reason
}

// Forward copies in control mode with the shallowest engine without
// marking the pair spliced.
func (s *session) Forward(ctx context.Context, opts engine.Options) (engine.Result, error) {
	ctl := controlEngine(s.l.chain)
	if name, _ := s.p.Engine(); name == "" {
		s.p.SetEngine("control", "")
	}
	return ctl.Splice(ctx, s.p, opts)
}

// Stopping is closed when a graceful shutdown begins, or when a reload
// retires the pair's listener.
func (s *session) Stopping() <-chan struct{} { return s.l.life.stopping }

// NoSplice records why the pair stays in control mode.
func (s *session) NoSplice(reason string) {
	s.p.SetEngine(controlEngine(s.l.chain).Name(), reason)
}

// RecordRequest implements proxy.RequestRecorder: an HTTP proxy's answered
// request is counted by status class, its duration observed by listener,
// its bytes counted by the way they moved and, with an access log, written
// as a line of its own.
func (s *session) RecordRequest(r proxy.Request) {
	s.l.httpResponses(r.Status).Inc()
	s.l.observeRequest(r.Duration)
	s.l.addResponseBytes(r)
	if a := s.l.f.access; a != nil {
		a.LogAttrs(context.Background(), slog.LevelInfo, "request",
			slog.String("listener", s.l.cfg.Name), slog.String("client", s.p.ClientAddr().String()),
			slog.String("upstream", upstreamOf(s.p)), slog.String("method", r.Method), slog.String("host", r.Host),
			slog.String("path", r.Path), slog.Int("status", r.Status), slog.Int64("bytes", r.Bytes),
			slog.Float64("duration_s", r.Duration.Seconds()), slog.String("engine", engineOf(s.p)))
	}
}

func upstreamOf(p *engine.Pair) string {
	if a := p.UpstreamAddr(); a != nil {
		return a.String()
	}
	return ""
}

func engineOf(p *engine.Pair) string {
	name, _ := p.Engine()
	return name
}
