// Engine ip's life: its options, New, loading the datapath on first use, the sweeper, and Close.

package ip

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/caps"

	"github.com/splicer/splicer/engine/ip/internal/bhwatch"
	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/peerclock"
)

const (
	// statsEvery is how often a spliced pair's counters are copied to
	// the pair for /flows, and its idle timeout checked.
	statsEvery = 250 * time.Millisecond
	// sweepEvery is how often TIME_WAIT, reset and idle pairs are removed.
	sweepEvery = time.Second
	// learnTimeout bounds the wait for the peers' answers to the window
	// probes, on top of four round trips.
	learnTimeout = 100 * time.Millisecond
)

// Options configures engine ip. The zero value is usable.
type Options struct {
	// MaxPairs is how many pairs can be spliced at once (default 16384);
	// the datapath's table is preallocated for them.
	MaxPairs int
	// TimeWait is how long a pair stays in the datapath after both FINs
	// were acknowledged, to translate retransmitted FINs and last ACKs
	// (2MSL; default 60s, Linux's TIME_WAIT).
	TimeWait time.Duration
	// IdleTimeout removes pairs that forwarded nothing for this long, for
	// pairs whose ends vanished (default 0: never).
	IdleTimeout time.Duration
	// PinDir, if set, is a directory in a BPF file system where the
	// datapath's maps and tcx links are pinned, so that spliced pairs
	// outlive the process: the next engine with the same PinDir adopts
	// them (persist.go). Empty: nothing is pinned.
	PinDir string
	// LocalPorts, if set, is the range of local ports the forwarder dials
	// upstreams from (engine.UpstreamPorts): the engine reserves it in
	// its network namespace (net.ipv4.ip_local_reserved_ports) and holds
	// a pair's port toward its server while the pair is in the
	// datapath's table, so that a pair spliced until it closes holds no
	// socket; a pair dialled from another port (the range was busy
	// toward its server) has that port reserved too while it is in the
	// table. Zero, or where the range cannot be reserved: a pair holds a
	// duplicate of its upstream socket (porthold.go).
	LocalPorts PortRange
	// MinLimit is the smallest byte limit (engine.DirOptions.Limit) of a
	// direction the engine splices: Supports declines a shorter one, for
	// the next engine, since the splice and the unsplice cost more than
	// the datapath saves on it. 0: every limit.
	MinLimit int64
}

// PortRange is an inclusive range of local ports; the zero value is none.
type PortRange struct{ Low, High uint16 }

// datapathOptions is the options of this engine's datapaths, its own and
// the adopted ones: with a port range, the pairs' ports are held while
// they are in the table (porthold.go: onTable).
func (e *Engine) datapathOptions() datapath.Options {
	return datapath.Options{MaxPairs: e.opts.MaxPairs, TimeWait: e.opts.TimeWait, IdleTimeout: e.opts.IdleTimeout,
		OnTable: e.ports.onTable()}
}

// Engine is engine ip: the datapath's tc program forwards a spliced pair's
// packets, and the forwarder's two sockets are closed without a trace, or,
// when the splice may give the pair back (byte limits, watched or held
// directions, timers), left frozen and rebuilt in place when it does
// (unsplice.go). See README.md.
//
// Each part of the engine is a type of its own, with the lock that guards
// its state; Engine itself only loads and closes them.
type Engine struct {
	opts Options
	log  *slog.Logger

	// mu guards the engine's life: state and loadErr. What the load
	// sets (dp, home, pins, clocks.reader, devices.bh) is written under
	// it once, and read without it by what runs only after a load that
	// succeeded (splices, the engine's goroutines).
	mu      sync.Mutex
	state   lifeState
	loadErr error
	dp      *datapath.Datapath
	home    *homeNS
	// pins is the state of pinning, with Options.PinDir (persist.go);
	// nil without.
	pins *pins

	// devices has the devices the program is attached to, and the
	// grace periods (devices.go).
	devices *devices
	// inject sends segments through raw sockets (inject.go).
	inject *injector
	// followed has the pairs the engine follows, and its goroutines
	// (followers.go).
	followed *followers
	// ports hands out the local ports of upstream connections and
	// holds those of the pairs in the table (porthold.go).
	ports *portHolder
	// clocks learns and remembers the peers' timestamp clocks (clocks.go).
	clocks *peerClocks
	// counts has the engine's own counters (counters.go).
	counts *counts
	// hook, for tests, runs at points of a transition ("held": the pair
	// is inserted, held and kept; "unsplicing": both directions are
	// watched and the receivers have acknowledged everything).
	hook func(stage string)
}

// lifeState is where an engine is in its life.
type lifeState int8

const (
	stateNew    lifeState = iota // nothing loaded yet
	stateLoaded                  // the load ran; loadErr says how it went
	stateClosed                  // Close ran
)

// New returns engine ip with the datapath options opts (MaxPairs, TimeWait,
// IdleTimeout for pairs whose ends vanished). Nothing is loaded until Probe
// or the first Splice, which must run in the network namespace whose
// devices reach clients and servers. A nil log discards.
func New(opts Options, log *slog.Logger) *Engine {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("engine", "ip")
	return &Engine{
		opts:     opts,
		log:      log,
		devices:  &devices{attached: make(map[int]bool)},
		followed: newFollowers(),
		ports:    newPortHolder(log, opts.TimeWait),
		inject:   newInjector(),
		clocks:   &peerClocks{},
		counts:   &counts{},
	}
}

// Name is the engine's name in configurations, logs and metrics.
const Name = "ip"

// Name implements engine.Engine.
func (e *Engine) Name() string { return Name }

// Probe implements engine.Engine: it loads the datapath (once) in the
// calling thread's network namespace. Its error names the missing
// privilege (CAP_BPF, CAP_NET_ADMIN) or kernel feature.
func (e *Engine) Probe() error { return e.load() }

func (e *Engine) load() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == stateClosed {
		return datapath.ErrClosed
	}
	if e.state == stateNew {
		e.state = stateLoaded
		e.loadErr = e.loadLocked()
	}
	return e.loadErr
}

func (e *Engine) loadLocked() error {
	if err := caps.RequireBPF("engine ip"); err != nil {
		return err
	}
	home, err := openHomeNS(e.log)
	if err != nil {
		return err
	}
	e.ports.useRange(e.opts.LocalPorts)
	dp, err := datapath.Load(e.datapathOptions())
	if err != nil {
		home.close()
		return err
	}
	e.home, e.dp = home, dp
	e.ports.useDatapath(dp)
	e.ports.takeOver(home)
	e.inject.useHome(home, e.log)
	if e.opts.PinDir != "" {
		// What earlier processes left is adopted before the first
		// splice, so /flows and the sweeper have it from the start.
		e.pins = newPins(e.opts.PinDir)
		e.adoptAll()
		e.ports.claimOthers(e.pins)
	}
	if e.clocks.reader, err = peerclock.Load(); err != nil {
		e.log.Info("reading the peers' timestamp clocks from the sockets is unavailable: splices probe them instead", "err", err)
	}
	if e.devices.bh, err = bhwatch.Load(); err != nil {
		e.log.Info("watching the softirqs is unavailable: grace periods visit every CPU instead", "err", err)
	} else {
		e.devices.graces.Quick = e.devices.quickGrace
	}
	e.followed.start(e.readEvents)
	e.followed.start(e.sweep)
	return nil
}

// Supports implements engine.Engine. Byte limits, watched and held
// directions and timers are done by unsplicing (unsplice.go).
func (e *Engine) Supports(p *engine.Pair, opts engine.Options) error {
	if p.Upstream() == nil {
		return errors.New("the pair has no upstream connection")
	}
	if err := e.supportsLimits(opts); err != nil {
		return err
	}
	return supportsUnsplice(opts)
}

// supportsLimits declines a direction whose byte limit is below
// Options.MinLimit.
func (e *Engine) supportsLimits(opts engine.Options) error {
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		if o := opts.Dir(d); o.Mode == engine.Forward && o.Limit > 0 && o.Limit < e.opts.MinLimit {
			return fmt.Errorf("the %v limit of %d bytes is below engine ip's minimum (%d, engines.ip.min_body): splicing and unsplicing would cost more than they save", d, o.Limit, e.opts.MinLimit)
		}
	}
	return nil
}

// Close implements engine.Engine: it detaches the program from every device
// and frees the table (and, with a pin directory, removes the pins). Pairs
// still spliced then reach the forwarder's stack, which no longer has
// their sockets, and are reset; adopted pairs still followed are reset
// first. After LeavePairs, a pinned datapath that still holds pairs is left
// pinned instead, its program forwarding them, for the next process.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.state == stateClosed {
		e.mu.Unlock()
		return nil
	}
	e.state = stateClosed
	dp, home := e.dp, e.home
	e.mu.Unlock()
	if dp == nil {
		return nil
	}
	close(e.followed.stop)
	leave := e.followed.leave.Load()
	// Pairs the engine follows without their callers end as cancelled
	// (their callers cancel them first when they shut down).
	e.endDetached()
	if e.pins != nil {
		// Adopted followers reset their pairs, or leave them.
		e.stopAdopted()
	}
	// The sockets holding ports go first: once the program is detached,
	// the pairs' segments would reach them, and a frozen socket may
	// answer. (Repair mode sends nothing when they close.)
	e.ports.releaseAll()
	var err error
	if n := len(dp.Pairs()); leave && n > 0 && dp.Pinned() != "" {
		e.log.Info("leaving spliced pairs pinned for the next process", "pairs", n, "dir", dp.Pinned())
		err = dp.Leave() // ends readEvents
	} else {
		err = dp.Close() // ends readEvents
	}
	if e.pins != nil {
		err = errors.Join(err, e.closePins(leave))
	}
	e.followed.wg.Wait()
	if e.clocks.reader != nil {
		e.clocks.reader.Close()
	}
	if e.devices.bh != nil {
		e.devices.bh.Close()
	}
	e.inject.close()
	e.ports.giveBack(leave)
	home.close()
	return err
}

// sweep removes pairs in TIME_WAIT for Options.TimeWait, reset or idle for
// Options.IdleTimeout, every sweepEvery until Close.
func (e *Engine) sweep() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-e.followed.stop:
			return
		case <-t.C:
		}
		removed, err := e.dp.Sweep(datapath.Now())
		if err != nil && !errors.Is(err, datapath.ErrClosed) {
			e.log.Warn("sweeping the pair table", "err", err)
		}
		for _, r := range removed {
			e.ports.release(r.Pair)
			e.notify(r.Pair, notice{removed: r.Reason})
		}
		if e.pins != nil {
			e.sweepAdopted(datapath.Now())
			e.ports.claimOthers(e.pins)
		}
		e.ports.sweep()
		// Ports of the pairs just removed leave the reservation.
		if err := e.ports.reserved.Load().Sync(); err != nil {
			e.log.Warn("giving back the local ports of ended pairs", "err", err)
		}
	}
}
