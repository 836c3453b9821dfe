// Pair: the two TCP connections a proxy joins, with the state and counters /flows reports.

package engine

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
)

// State is where a pair is in its life, as /flows shows it.
type State uint32

const (
	// StateControl: the proxy reads and decides.
	StateControl State = iota
	// StateSpliced: an engine forwards the bytes.
	StateSpliced
	// StateDraining: the engine delivers bytes buffered at the moment of
	// splicing or unsplicing.
	StateDraining
	// StateClosing: the pair is being torn down.
	StateClosing
)

func (s State) String() string {
	switch s {
	case StateControl:
		return "control"
	case StateSpliced:
		return "spliced"
	case StateDraining:
		return "draining"
	case StateClosing:
		return "closing"
	}
	return "unknown"
}

// Pair is a client connection and, once the proxy dialled it, an upstream
// connection. Engines read the connections and update the counters; the
// forwarder owns the pair and closes it.
type Pair struct {
	ID       uint64
	Listener string
	Client   *net.TCPConn
	Created  time.Time
	// origin and originLocal are the client and the address it reached,
	// as a trusted balancer's PROXY protocol header named them
	// (SetOrigin); nil when the client is the socket's peer. Guarded by
	// mu with Client from ForgetConns on.
	origin, originLocal net.Addr
	// ends are the sockets' addresses once ForgetConns dropped them
	// (client, the address it reached, upstream), as values.
	ends [3]packedAddr

	mu       sync.Mutex
	upstream *net.TCPConn
	// lastAddr is the latest upstream's address, kept after a proxy gives
	// the connection up (an HTTP proxy's pool takes it).
	lastAddr net.Addr
	engine   string
	note     string
	// pending is the engine a splice is being tried with: shown once the
	// pair leaves control mode, kept by CommitEngine, replaced on fallback.
	pending, pendingNote string

	state atomic.Uint32
	bytes [2]atomic.Int64
	// finSent has bit d set once direction d's FIN was forwarded.
	finSent atomic.Uint32
}

// NewPair returns a pair in control mode for an accepted client connection.
func NewPair(id uint64, listener string, client *net.TCPConn) *Pair {
	return &Pair{ID: id, Listener: listener, Client: client, Created: time.Now()}
}

// SetOrigin records the client a trusted balancer's PROXY protocol header
// named, and the address that client connected to. The forwarder calls it
// before any proxy or engine sees the pair. Engines keep to the sockets'
// own addresses: the client socket's peer is still the balancer, and it
// is with the balancer that the datapath exchanges segments.
func (p *Pair) SetOrigin(client, local net.Addr) {
	p.origin, p.originLocal = client, local
}

// ClientAddr is the client's address as everything above the datapath
// uses it (access rules, the per-client cap, logs, Forwarded,
// consistent hashing, a PROXY header sent on): the one a trusted
// balancer named, or else the socket's peer.
func (p *Pair) ClientAddr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.origin != nil {
		return p.origin
	}
	if p.Client == nil {
		return p.ends[endClient].addr()
	}
	return p.Client.RemoteAddr()
}

// ClientLocalAddr is the address the client connected to: the
// balancer's, as its header named it, or else the socket's own.
func (p *Pair) ClientLocalAddr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.originLocal != nil {
		return p.originLocal
	}
	if p.Client == nil {
		return p.ends[endLocal].addr()
	}
	return p.Client.LocalAddr()
}

// Upstream returns the upstream connection, or nil before the proxy dialled.
func (p *Pair) Upstream() *net.TCPConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upstream
}

// CloseConns closes the client and the upstream connection. Only the
// forwarder, which owns the pair, calls it: when the pair ends, or earlier
// when an engine reports the sockets detached (Options.OnDetached).
func (p *Pair) CloseConns() error {
	var errs []error
	p.mu.Lock()
	c := p.Client
	p.mu.Unlock()
	if c != nil {
		errs = append(errs, c.Close())
	}
	if up := p.Upstream(); up != nil {
		errs = append(errs, up.Close())
	}
	return errors.Join(errs...)
}

// ForgetConns drops the client connection, closed (CloseConns) once an
// engine detached the pair's sockets, keeping its addresses for
// ClientAddr and ClientLocalAddr, and the upstream's, packed in the
// record (packedAddr): a closed *net.TCPConn still holds its descriptor
// record and raw addresses, a few hundred bytes a pair that an idle
// spliced pair would carry for its life. Only the forwarder calls it,
// after SetUpstream(nil); Client is nil after.
func (p *Pair) ForgetConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.upstream == nil && p.lastAddr != nil {
		p.lastAddr = p.ends[endUpstream].pack(p.lastAddr)
	}
	if p.Client == nil {
		return
	}
	if p.origin == nil {
		p.origin = p.ends[endClient].pack(p.Client.RemoteAddr())
		p.originLocal = p.ends[endLocal].pack(p.Client.LocalAddr())
	}
	p.Client = nil
}

// The ends a pair keeps addresses of once its sockets are gone.
const (
	endClient = iota
	endLocal
	endUpstream
)

// packedAddr is a TCP address kept as a value: a socket's own
// *net.TCPAddr points into the raw sockaddr it was parsed from, which
// it keeps alive (about 120 bytes an address), and even a fresh copy
// takes 56 bytes of heap behind a 16-byte interface, for the life of an
// idle spliced pair. addr makes a *net.TCPAddr again when asked (/flows,
// the closing log line).
type packedAddr struct {
	ip   [16]byte
	port uint16
	// is4: ip holds an IPv4 address in its first 4 bytes; set: the
	// address was packed.
	is4, set bool
}

// pack keeps a in pk and returns nil, or returns a when it is no TCP
// address or has a zone, which a packedAddr does not keep.
func (pk *packedAddr) pack(a net.Addr) net.Addr {
	t, ok := a.(*net.TCPAddr)
	if !ok || t.Zone != "" {
		return a
	}
	ap := t.AddrPort()
	ip := ap.Addr().Unmap()
	*pk = packedAddr{port: ap.Port(), is4: ip.Is4(), set: true}
	if pk.is4 {
		v := ip.As4()
		copy(pk.ip[:], v[:])
	} else {
		pk.ip = ip.As16()
	}
	return nil
}

// addr is the address packed, nil if none was.
func (pk *packedAddr) addr() net.Addr {
	if !pk.set {
		return nil
	}
	ip := netip.AddrFrom16(pk.ip)
	if pk.is4 {
		ip = netip.AddrFrom4([4]byte(pk.ip[:4]))
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, pk.port))
}

// SetUpstream records the upstream connection; nil when the proxy gave it
// up, to a pool that keeps it open for another pair.
func (p *Pair) SetUpstream(c *net.TCPConn) {
	p.mu.Lock()
	if c != p.upstream {
		p.finSent.And(^uint32(1 << Up)) // a new upstream has heard no FIN
	}
	p.upstream = c
	if c != nil {
		p.lastAddr = c.RemoteAddr()
	}
	p.mu.Unlock()
}

// ForwardFIN passes direction d's FIN on: it shuts the write side of Dst(d),
// once per connection. A later call, from a splice after the one that
// forwarded the FIN, does nothing: shutting the socket again would fail with
// ENOTCONN once the peer's own FIN has closed it, which is no reset.
//
// A source whose read ended while it is closed, and which was never sent a
// FIN, was reset, not closed: the kernel reports a reset once, and a write
// to the same socket (the other direction) may have taken the report
// first, leaving this read a plain EOF. Then ForwardFIN returns
// ECONNRESET instead of passing a FIN on, which would end the other
// side's stream cleanly where the reset cut it.
func (p *Pair) ForwardFIN(d Direction) error {
	bit := uint32(1) << d
	// The bit goes up before the FIN goes out: the peer's answering FIN
	// may close the socket, and the other direction read its EOF, before
	// this goroutine runs again, and that direction's check below must
	// know a FIN was sent.
	if p.finSent.Or(bit)&bit != 0 {
		return nil
	}
	// closed is read before the other direction's bit: a socket closed by
	// FINs both ways had that bit up before its FIN left. With the bit
	// already up (the pair's second FIN, in every pair that closes
	// cleanly) the socket's state is not asked at all.
	rev := uint32(1) << d.Reverse()
	if p.finSent.Load()&rev == 0 && closed(p.Src(d)) && p.finSent.Load()&rev == 0 {
		p.finSent.And(^bit)
		return fmt.Errorf("%s read EOF on a connection closed by a reset: %w", d, syscall.ECONNRESET)
	}
	if err := p.Dst(d).CloseWrite(); err != nil {
		p.finSent.And(^bit)
		return err
	}
	return nil
}

// UpstreamAddr returns the upstream's address, or the last upstream's once
// the proxy gave it up; nil before the proxy dialled.
func (p *Pair) UpstreamAddr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastAddr == nil {
		return p.ends[endUpstream].addr()
	}
	return p.lastAddr
}

// Src returns the connection bytes of direction d are read from.
func (p *Pair) Src(d Direction) *net.TCPConn {
	if d == Up {
		return p.Client
	}
	return p.Upstream()
}

// Dst returns the connection bytes of direction d are written to.
func (p *Pair) Dst(d Direction) *net.TCPConn {
	if d == Up {
		return p.Upstream()
	}
	return p.Client
}

// State returns the pair's current state.
func (p *Pair) State() State { return State(p.state.Load()) }

// SetState moves the pair to s.
func (p *Pair) SetState(s State) { p.state.Store(uint32(s)) }

// MarkSpliced moves the pair from control to spliced, leaving any other
// state (draining, which the engine reported first) as it is.
func (p *Pair) MarkSpliced() {
	p.state.CompareAndSwap(uint32(StateControl), uint32(StateSpliced))
}

// Engine returns the name of the engine that last forwarded the pair, and a
// note saying why that engine (a fallback reason, or why it is never spliced).
func (p *Pair) Engine() (name, note string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending != "" && p.State() != StateControl {
		return p.pending, p.pendingNote
	}
	return p.engine, p.note
}

// SetPending records the engine a splice is about to be tried with. Until
// the engine moves the pair out of control mode (draining or spliced),
// Engine still reports the previous one, so /flows never names an engine
// that may yet decline the pair.
func (p *Pair) SetPending(name, note string) {
	p.mu.Lock()
	p.pending, p.pendingNote = name, note
	p.mu.Unlock()
}

// CommitEngine makes the pending engine the pair's engine, once the splice
// it was tried for has run.
func (p *Pair) CommitEngine() {
	p.mu.Lock()
	if p.pending != "" {
		p.engine, p.note = p.pending, p.pendingNote
		p.pending, p.pendingNote = "", ""
	}
	p.mu.Unlock()
}

// SetEngine records which engine forwards the pair and why.
func (p *Pair) SetEngine(name, note string) {
	p.mu.Lock()
	p.engine, p.note = name, note
	p.mu.Unlock()
}

// AddBytes counts n bytes forwarded in direction d, by an engine or by the
// proxy in control mode.
func (p *Pair) AddBytes(d Direction, n int64) { p.bytes[d].Add(n) }

// Bytes returns the bytes forwarded in direction d so far.
func (p *Pair) Bytes(d Direction) int64 { return p.bytes[d].Load() }

// closed reports whether c's TCP connection is closed (TCP_CLOSE): reset or
// timed out, or with FINs both ways (the kernel hands TIME_WAIT to a
// smaller socket); not when only the peer's FIN came. An error reading the
// state counts as not closed.
func closed(c *net.TCPConn) bool {
	info, err := sockopt.TCPInfo(c)
	return err == nil && info.State == unix.BPF_TCP_CLOSE
}
