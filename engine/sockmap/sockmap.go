// Package sockmap is the engine that splices a pair at the socket level: a BPF sockhash with sk_skb parser and verdict programs moves bytes from one socket's receive path to the other's send queue.
//
// Both TCP connections keep running in the kernel, with their own ACK
// clocks, windows and options; only the copy through the forwarder process
// goes away (Rosu's socket-level TCP Splice). One Engine loads the programs
// and maps once and serves every pair; a pair is a few map entries.
//
// At most one direction of a pair runs through the kernel at a time; when
// both directions forward, the other one is pumped by the engine in user
// space. README.md says why (flow control) and lists the kernel pitfalls met
// and how each is handled. Needs CAP_BPF and CAP_NET_ADMIN, Linux 6.x.
package sockmap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/splicer/splicer/engine"
)

// Name is the engine's configuration name.
const Name = "sockmap"

// Defaults for Options.
const (
	DefaultMaxPairs      = 65536
	DefaultWindow        = 4 << 20
	DefaultStatsInterval = time.Second
)

// Options configure an Engine; the zero value uses the defaults.
type Options struct {
	// MaxPairs bounds the pairs spliced at once (the maps' size).
	MaxPairs int
	// Window is how many bytes the kernel may have forwarded ahead of what
	// the destination socket took, per pair; past it the source is paused
	// and TCP pushes back on its sender.
	Window int64
	// StatsInterval is how often the pair byte counters are refreshed while
	// spliced.
	StatsInterval time.Duration
}

func (o Options) withDefaults() Options {
	if o.MaxPairs <= 0 {
		o.MaxPairs = DefaultMaxPairs
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.StatsInterval <= 0 {
		o.StatsInterval = DefaultStatsInterval
	}
	return o
}

// Stats are the engine's counters since New.
type Stats struct {
	Splices       uint64 // Splice calls that spliced (not fallen back)
	Active        int64  // splices running now
	Fallbacks     uint64 // Splice calls answered with a FallbackError
	GiveBacks     uint64 // splices that handed the pair back (limit, data, timer)
	Pauses        uint64 // flow-control pauses of a source socket
	KernelBytes   uint64 // bytes the kernel redirected
	UserBytes     uint64 // bytes the engine pumped in user space
	Redirects     uint64 // messages the verdict redirected
	ParserStops   uint64 // times a parser refused bytes (limit, pause, stop)
	DropsNoState  uint64 // messages dropped: socket without state
	DropsNoPeer   uint64 // messages dropped: destination gone
	EventsLost    uint64 // parser events dropped because the ring was full
	RingbufErrors uint64 // events that could not be read
}

// Engine splices pairs through the sockhash.
type Engine struct {
	opts Options
	log  *slog.Logger
	dp   *datapath
	rb   *ringbuf.Reader

	mu       sync.Mutex
	byCookie map[uint64]*splice // source socket cookie -> splice
	active   map[*splice]struct{}

	splices, fallbacks, giveBacks, pauses, userBytes, rbErrors atomic.Uint64
	nactive                                                    atomic.Int64

	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	// dpMu keeps Close from freeing the maps under a metrics scrape;
	// final is what the BPF counters read when they were freed.
	dpMu   sync.RWMutex
	closed bool
	final  [counterMax]uint64
}

// New loads the programs and maps. The error names the missing privilege or
// kernel feature.
func New(opts Options, log *slog.Logger) (*Engine, error) {
	if log == nil {
		log = slog.Default()
	}
	opts = opts.withDefaults()
	dp, err := loadDatapath(opts.MaxPairs)
	if err != nil {
		return nil, err
	}
	rb, err := ringbuf.NewReader(dp.objs.Events)
	if err != nil {
		dp.close()
		return nil, fmt.Errorf("open sockmap event ring: %w", err)
	}
	e := &Engine{
		opts: opts, log: log, dp: dp, rb: rb,
		byCookie: make(map[uint64]*splice),
		active:   make(map[*splice]struct{}),
		done:     make(chan struct{}),
	}
	e.wg.Add(2)
	go e.readEvents()
	go e.refreshCounters()
	return e, nil
}

// Name implements engine.Engine.
func (e *Engine) Name() string { return Name }

// Probe implements engine.Engine: a constructed engine has its programs loaded.
func (e *Engine) Probe() error {
	select {
	case <-e.done:
		return errors.New("sockmap engine closed")
	default:
		return nil
	}
}

// Supports implements engine.Engine: every option is honoured; only a pair
// without an upstream cannot be spliced.
func (e *Engine) Supports(p *engine.Pair, opts engine.Options) error {
	if p.Client == nil || p.Upstream() == nil {
		return errors.New("sockmap: pair has no upstream connection yet")
	}
	if opts.Up.Mode != engine.Forward && opts.Down.Mode != engine.Forward && !opts.HasWatch() {
		return errors.New("sockmap: nothing to forward or watch")
	}
	return nil
}

// Close implements engine.Engine: it unloads programs and maps. Splices
// still running must have ended.
func (e *Engine) Close() error {
	var err error
	e.once.Do(func() {
		close(e.done)
		e.rb.Close()
		e.wg.Wait()
		e.dpMu.Lock()
		defer e.dpMu.Unlock()
		e.final, e.closed = e.dp.counters(), true
		err = e.dp.close()
	})
	return err
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	s := Stats{
		Splices:       e.splices.Load(),
		Active:        e.nactive.Load(),
		Fallbacks:     e.fallbacks.Load(),
		GiveBacks:     e.giveBacks.Load(),
		Pauses:        e.pauses.Load(),
		UserBytes:     e.userBytes.Load(),
		RingbufErrors: e.rbErrors.Load(),
	}
	for i, v := range e.bpfCounters() {
		*counterFields[i](&s) = v
	}
	return s
}

// bpfCounters reads the BPF counters, or their last values once Close
// freed the maps.
func (e *Engine) bpfCounters() [counterMax]uint64 {
	e.dpMu.RLock()
	defer e.dpMu.RUnlock()
	if e.closed {
		return e.final
	}
	return e.dp.counters()
}

// counterFields says which field of Stats reports each BPF counter, by
// enum counter index; TestCounterFields fails when the C counts something
// Stats does not report.
var counterFields = [counterMax]func(*Stats) *uint64{
	counterRedirectMsgs:  func(s *Stats) *uint64 { return &s.Redirects },
	counterRedirectBytes: func(s *Stats) *uint64 { return &s.KernelBytes },
	counterParserStops:   func(s *Stats) *uint64 { return &s.ParserStops },
	counterDropNoState:   func(s *Stats) *uint64 { return &s.DropsNoState },
	counterDropNoPeer:    func(s *Stats) *uint64 { return &s.DropsNoPeer },
	counterEventsLost:    func(s *Stats) *uint64 { return &s.EventsLost },
}

// Splice implements engine.Engine.
func (e *Engine) Splice(ctx context.Context, p *engine.Pair, opts engine.Options) (engine.Result, error) {
	if err := e.Supports(p, opts); err != nil {
		e.fallbacks.Add(1)
		return engine.Result{}, engine.Fallback(Name, "%v", err)
	}
	s := newSplice(e, p, opts)
	if err := s.setup(); err != nil {
		e.fallbacks.Add(1)
		e.log.Debug("sockmap falls back", "pair", p.ID, "err", err)
		return engine.Result{}, engine.Fallback(Name, "%v", err)
	}
	e.splices.Add(1)
	e.nactive.Add(1)
	defer e.nactive.Add(-1)
	res := s.run(ctx)
	if res.End.KeepsPair() {
		e.giveBacks.Add(1)
	}
	return res, nil
}

// register makes s reachable by its kernel source socket's cookie.
func (e *Engine) register(s *splice, cookie uint64) {
	e.mu.Lock()
	if cookie != 0 {
		e.byCookie[cookie] = s
	}
	e.active[s] = struct{}{}
	e.mu.Unlock()
}

func (e *Engine) unregister(s *splice, cookie uint64) {
	e.mu.Lock()
	if cookie != 0 && e.byCookie[cookie] == s {
		delete(e.byCookie, cookie)
	}
	delete(e.active, s)
	e.mu.Unlock()
}

// readEvents passes the parser's ring buffer events to their splices.
func (e *Engine) readEvents() {
	defer e.wg.Done()
	for {
		rec, err := e.rb.Read()
		if errors.Is(err, ringbuf.ErrClosed) {
			return
		}
		if err != nil || len(rec.RawSample) < eventSize {
			e.rbErrors.Add(1)
			continue
		}
		ev := decodeEvent(rec.RawSample)
		e.mu.Lock()
		s := e.byCookie[ev.Cookie]
		e.mu.Unlock()
		if s != nil {
			s.event(ev.Kind)
		}
	}
}

// refreshCounters updates the byte counters of spliced pairs for /flows.
func (e *Engine) refreshCounters() {
	defer e.wg.Done()
	t := time.NewTicker(e.opts.StatsInterval)
	defer t.Stop()
	for {
		select {
		case <-e.done:
			return
		case <-t.C:
		}
		e.mu.Lock()
		list := make([]*splice, 0, len(e.active))
		for s := range e.active {
			list = append(list, s)
		}
		e.mu.Unlock()
		for _, s := range list {
			s.report()
		}
	}
}

// conns returns the pair's two sockets.
func conns(p *engine.Pair) [2]*net.TCPConn {
	return [2]*net.TCPConn{p.Client, p.Upstream()}
}
