// Package engine defines the contract between the forwarder and the engines that move a pair's bytes in forwarding mode.
//
// A pair is two TCP connections, the client's and the upstream's, joined by a
// proxy. In control mode the proxy reads and decides; when only forwarding is
// left it calls Splice on an engine, which moves bytes until one of the
// conditions in Options ends forwarding, and then gives the pair back.
//
// Engines form a ladder from shallow to deep:
//
//	copy     read() into a user buffer, write() out
//	pipe     splice(2) socket -> pipe -> socket
//	sockmap  BPF sockhash + sk_skb verdict: the kernel moves skbs between sockets
//	ip       BPF at tc rewrites TCP/IP headers: the forwarder runs no TCP for the pair
//
// Every engine delivers exactly the byte stream a direct connection would,
// forwards a FIN only after every earlier byte was delivered, and turns a reset
// on one side into a reset on the other.
package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/splicer/splicer/internal/sockopt"
)

// Engine moves the bytes of a pair in forwarding mode.
type Engine interface {
	// Name is the engine's configuration name: copy, pipe, sockmap or ip.
	Name() string
	// Probe reports whether the engine can run on this host; the error names
	// the missing privilege or kernel feature.
	Probe() error
	// Supports reports whether the engine can honour opts for this pair. A
	// non-nil error makes the caller fall back to a shallower engine.
	Supports(p *Pair, opts Options) error
	// Splice forwards the pair's bytes until Options says stop, the pair ends,
	// or ctx is cancelled. It returns a *FallbackError, having touched no byte,
	// when the pair cannot be spliced by this engine after all.
	Splice(ctx context.Context, p *Pair, opts Options) (Result, error)
	// Close releases what the engine holds for all pairs (BPF programs, pools).
	Close() error
}

// Mode says what an engine does with one direction of a pair.
type Mode uint8

const (
	// Forward moves bytes in this direction, up to Limit if Limit > 0.
	Forward Mode = iota
	// Watch forwards nothing and ends the splice as soon as data arrives;
	// the data stays on the source socket for the proxy to read.
	Watch
	// Hold forwards nothing and does not watch: the direction is paused.
	Hold
)

func (m Mode) String() string {
	switch m {
	case Forward:
		return "forward"
	case Watch:
		return "watch"
	case Hold:
		return "hold"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Direction names one way through a pair.
type Direction uint8

const (
	// Up is client -> upstream.
	Up Direction = iota
	// Down is upstream -> client.
	Down
)

// Reverse is the other way through the pair.
func (d Direction) Reverse() Direction { return 1 - d }

func (d Direction) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// DirOptions controls one direction of a splice.
type DirOptions struct {
	Mode Mode
	// Limit, with Mode Forward, is the exact number of bytes to forward
	// before the splice ends and the proxy regains control; 0 means no limit
	// (forward until EOF). Bytes past the limit stay on the source socket.
	Limit int64
}

// Options says how long an engine forwards a pair.
//
// A splice ends when: a limited direction has forwarded exactly its limit
// (EndLimit); a watched direction has data (EndData); every Forward direction
// without a limit has seen EOF and forwarded it as a FIN (EndEOF); either side
// reset the connection (EndReset); no byte moved for IdleTimeout (EndIdle); For
// elapsed (EndTimer); Promote's bytes moved or its time elapsed
// (EndPromote); or ctx was cancelled (EndCancel).
type Options struct {
	Up, Down DirOptions
	// IdleTimeout ends the splice when no byte moved either way for this
	// long; 0 disables it.
	IdleTimeout time.Duration
	// For ends the splice after this long with the pair intact (EndTimer);
	// 0 disables it. Proxies use it to forward in control mode for a while.
	For time.Duration
	// Promote ends the splice with the pair intact (EndPromote) once the
	// pair has proved long enough for a deeper engine: engine auto starts
	// a pair on a cheap engine and hands it to ip past these thresholds,
	// so short pairs never pay ip's splice. Only the engines that move
	// bytes through the process (Run: copy, pipe) honour it; the
	// forwarder sets it for no other.
	Promote Promotion
	// OnSpliced, if set, is called once when forwarding is in place (for an
	// engine with kernel state: when the state is installed). The time from
	// calling Splice to OnSpliced is the splice cost the bench reports.
	OnSpliced func()
	// OnDetached, if set, is called at most once when the engine no
	// longer needs the pair's sockets and closing them sends nothing to
	// the peers (ip, once a pair that cannot be given back lives in its
	// datapath, leaves both sockets in repair mode). The forwarder, which
	// owns the sockets, closes them then, so they cost nothing for the
	// rest of the pair's life; unset, they close with the pair. Engines
	// never close a pair's sockets themselves.
	OnDetached func()
	// OnEnd, if set, lets Splice return before the pair ends, with End
	// EndDetached, once the engine follows the pair without the caller
	// (ip: a pair spliced until it closes whose sockets it detached and
	// that owes no bytes: its datapath forwards it, and one goroutine of
	// the engine follows all such pairs). The engine then calls OnEnd
	// once, when the pair ends, with the Result Splice would have
	// returned; it keeps updating the pair's counters until then, and
	// cancelling ctx ends the pair as it would have (so ctx must outlive
	// Splice's return). Unset, Splice returns when the pair ends.
	OnEnd func(Result)
	// OnDraining, if set, is called with true when the engine starts
	// delivering bytes buffered at the moment of splicing or unsplicing,
	// and with false when they are delivered; the forwarder shows the pair
	// draining meanwhile. Engines never set a pair's state themselves.
	OnDraining func(draining bool)
}

// Promotion is when a splice ends for a deeper engine to take the pair
// over: after Bytes moved, both ways together, or After elapsed, whichever
// comes first; 0 leaves that threshold out.
type Promotion struct {
	Bytes int64
	After time.Duration
}

// On reports whether any threshold is set.
func (p Promotion) On() bool { return p.Bytes > 0 || p.After > 0 }

// ReportDraining calls OnDraining, if set.
func (o Options) ReportDraining(draining bool) {
	if o.OnDraining != nil {
		o.OnDraining(draining)
	}
}

// Dir returns the options of direction d.
func (o Options) Dir(d Direction) DirOptions {
	if d == Up {
		return o.Up
	}
	return o.Down
}

// Both returns options that forward both directions until EOF.
func Both(idle time.Duration) Options {
	return Options{IdleTimeout: idle}
}

// HasLimits reports whether any direction is byte-limited.
func (o Options) HasLimits() bool {
	return (o.Up.Mode == Forward && o.Up.Limit > 0) || (o.Down.Mode == Forward && o.Down.Limit > 0)
}

// HasWatch reports whether any direction is watched.
func (o Options) HasWatch() bool {
	return o.Up.Mode == Watch || o.Down.Mode == Watch
}

// End says why a splice ended.
type End uint8

const (
	// EndEOF: every unlimited forwarding direction saw EOF and sent FIN.
	EndEOF End = iota
	// EndLimit: a direction forwarded exactly its limit; the pair is open
	// and back in control mode.
	EndLimit
	// EndData: a watched direction has data; the pair is open and back in
	// control mode.
	EndData
	// EndReset: one side reset; the engine reset the other side.
	EndReset
	// EndIdle: nothing moved for the idle timeout.
	EndIdle
	// EndCancel: the context was cancelled (shutdown).
	EndCancel
	// EndError: a local error ended the splice; Result.Err says which.
	EndError
	// EndTimer: Options.For elapsed; the pair is open and back in control mode.
	EndTimer
	// EndDetached: the engine follows the pair on its own and reports
	// how it ends through Options.OnEnd; the caller is done with it.
	EndDetached
	// EndPromote: Options.Promote's threshold was reached; the pair is
	// open and back in control mode, for a deeper engine to take over.
	EndPromote
)

func (e End) String() string {
	switch e {
	case EndEOF:
		return "eof"
	case EndLimit:
		return "limit"
	case EndData:
		return "data"
	case EndReset:
		return "reset"
	case EndIdle:
		return "idle"
	case EndCancel:
		return "cancel"
	case EndError:
		return "error"
	case EndTimer:
		return "timer"
	case EndDetached:
		return "detached"
	case EndPromote:
		return "promote"
	}
	return fmt.Sprintf("end(%d)", uint8(e))
}

// KeepsPair reports whether the pair is still usable in control mode after a
// splice that ended this way.
func (e End) KeepsPair() bool {
	return e == EndLimit || e == EndData || e == EndTimer || e == EndPromote
}

// Result reports how a splice ended.
type Result struct {
	End End
	// Dir is the direction that triggered EndLimit, EndData or EndReset.
	Dir Direction
	// Moved is the number of bytes this splice forwarded in each direction.
	Moved [2]int64
	// EOF records which directions saw EOF and forwarded it as a FIN.
	EOF [2]bool
	// Err is the error behind EndError or EndReset, if any.
	Err error
}

// Remaining returns how many bytes of a limited direction are still to be
// forwarded after r, or 0 when the direction was unlimited or is done.
func (r Result) Remaining(opts Options, d Direction) int64 {
	o := opts.Dir(d)
	if o.Mode != Forward || o.Limit == 0 {
		return 0
	}
	return o.Limit - r.Moved[d]
}

// FallbackError says an engine cannot splice a pair and a shallower one should.
type FallbackError struct {
	Engine string
	Reason string
}

func (e *FallbackError) Error() string {
	return fmt.Sprintf("engine %s cannot splice this pair: %s", e.Engine, e.Reason)
}

// Fallback returns a *FallbackError for engine name.
func Fallback(name, format string, args ...any) error {
	return &FallbackError{Engine: name, Reason: fmt.Sprintf(format, args...)}
}

// IsFallback reports whether err asks for a shallower engine.
func IsFallback(err error) bool {
	var fe *FallbackError
	return errors.As(err, &fe)
}

// Counters is implemented by engines that keep counters of their own (BPF
// redirects, drops by reason, give-backs, bytes moved). The forwarder
// exports them as splicer_engine_events_total{engine, event}, except those
// whose name ends in "_bytes", which count bytes: they are
// splicer_engine_bytes_total{engine, kind}, kind the name without the
// suffix.
type Counters interface {
	Counters() map[string]uint64
}

// Optional capabilities an engine may have. The forwarder asks for them by
// type assertion, never by an engine's name.

// SegmentRelay is an engine that moves the peers' segments between the two
// connections unchanged in size (ip): the upstream must then announce the
// client's MSS, so that neither side sends segments the other cannot take.
type SegmentRelay interface {
	RelaysSegments() bool
}

// UpstreamPorts is an engine that hands out the local ports of the pairs'
// upstream connections (ip: a pair spliced until it closes keeps no
// socket, so the engine keeps its port from new connections to the same
// server while its datapath holds the pair). The forwarder binds each
// upstream socket of the engine's listeners to the port it returns.
type UpstreamPorts interface {
	// UpstreamPort returns a local port for a new connection to server;
	// false lets the kernel pick one. The port stays the connection's
	// toward server until UpstreamDialled gives it back or names the
	// connection dialled from it.
	UpstreamPort(server netip.AddrPort) (port uint16, ok bool)
	// UpstreamDialled says what became of a port UpstreamPort returned
	// for server: c is the connection dialled from it, which keeps it
	// until c is closed; nil c gives it back (the dial failed, or its
	// socket took another port).
	UpstreamDialled(server netip.AddrPort, port uint16, c *net.TCPConn)
}

// LateUpstreamPorts is an UpstreamPorts that can be told of a dialled
// connection before it learns what it needs to splice it (ip: the
// kernel's timestamp clock of the connection, two system calls), which
// it then learns only if the connection is to be spliced by it: a pair
// that stays on another engine (every pair of a listener without ip,
// most pairs of one with promotion) does without.
type LateUpstreamPorts interface {
	UpstreamPorts
	// UpstreamDialledLate is UpstreamDialled for a connection the engine
	// will not splice before UpstreamSplicing named it: until then the
	// engine has c's port as used toward server, and nothing more.
	UpstreamDialledLate(server netip.AddrPort, port uint16, c *net.TCPConn)
	// UpstreamSplicing completes what UpstreamDialledLate left out for
	// c, which no engine has spliced but the forwarder's own copy (its
	// sockets are still as dialled), before a deeper engine takes its
	// pair. It does nothing for a connection not dialled from a port the
	// engine handed out.
	UpstreamSplicing(c *net.TCPConn)
}

// SettlePicks tells ports what became of the ports it handed out for
// one dial: c (nil if the dial failed) keeps the one it left from
// toward the server it reached; the others are given back.
func SettlePicks(ports UpstreamPorts, picks []sockopt.Pick, c net.Conn) {
	settlePicks(ports, picks, c, ports.UpstreamDialled)
}

// SettlePicksLate is SettlePicks for a connection that is not spliced
// before LateUpstreamPorts.UpstreamSplicing named it, when ports can
// wait for it; it reports whether ports did (UpstreamSplicing is then
// due before a splice by any engine but the forwarder's own copy).
func SettlePicksLate(ports UpstreamPorts, picks []sockopt.Pick, c net.Conn) (late bool) {
	lp, ok := ports.(LateUpstreamPorts)
	if !ok {
		SettlePicks(ports, picks, c)
		return false
	}
	settlePicks(ports, picks, c, lp.UpstreamDialledLate)
	return true
}

// settlePicks is SettlePicks with dialled the way to tell ports of the
// connection.
func settlePicks(ports UpstreamPorts, picks []sockopt.Pick, c net.Conn, dialled func(netip.AddrPort, uint16, *net.TCPConn)) {
	tc, _ := c.(*net.TCPConn)
	var local, remote netip.AddrPort
	if tc != nil {
		local, remote = tcpAddrPort(tc.LocalAddr()), tcpAddrPort(tc.RemoteAddr())
	}
	for _, p := range picks {
		if tc != nil && local.Port() == p.Port && remote.Addr().Unmap() == p.Server.Addr().Unmap() && remote.Port() == p.Server.Port() {
			dialled(p.Server, p.Port, tc)
		} else {
			ports.UpstreamDialled(p.Server, p.Port, nil)
		}
	}
}

// tcpAddrPort is a's address and port, without formatting and parsing
// it again: SettlePicks runs for every pair dialled from a range.
func tcpAddrPort(a net.Addr) netip.AddrPort {
	ta, _ := a.(*net.TCPAddr)
	if ta == nil {
		return netip.AddrPort{}
	}
	return ta.AddrPort()
}

// ControlMode is the engine whose copy loop is the proxy's own control-mode
// forwarding (copy): /flows names it for pairs never spliced.
type ControlMode interface {
	ControlMode() bool
}

// MinLimited is an engine that declines splices with a byte limit below a
// floor (ip: engines.ip.min_body), because shorter ones cost it more to
// splice and give back than its datapath saves. http-reverse copies the
// bodies it would decline itself rather than splice them with a shallower
// engine (see httpcore.Conn.CopyBelow).
type MinLimited interface {
	MinLimit() int64
}

// UnspliceObserver is an engine that gives pairs back in control mode by
// rebuilding their sockets (ip): fn gets how long each unsplice took.
type UnspliceObserver interface {
	ObserveUnsplice(fn func(time.Duration))
}

// Outliving is an engine whose spliced pairs can outlive the process (ip
// with a pin directory: its BPF program forwards them without the
// process). After LeavePairs, a pair still spliced when the forwarder
// cancels it, and every pair left at Close, is left forwarding for the
// next process to adopt instead of being closed. The old process of an
// upgrade calls it.
type Outliving interface {
	LeavePairs()
}

// AdoptedPair is a spliced pair an engine took over from an earlier
// process: it has no sockets and no forwarder pair in this process, only
// what the engine's tables hold.
type AdoptedPair struct {
	// Client is the client's address, Local the forwarder's address the
	// client connected to (the listener's), Server the upstream's.
	Client, Local, Server netip.AddrPort
	State                 State
	Bytes                 [2]int64
	// Adopted is when this process took the pair over.
	Adopted time.Time
}

// Adopting is an engine that adopts the pairs an earlier process left
// spliced (ip with a pin directory); /flows lists them.
type Adopting interface {
	// Adopted returns the adopted pairs still followed.
	Adopted() []AdoptedPair
}
