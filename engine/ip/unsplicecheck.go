// Whether a pair can be unspliced, checked before it is spliced: the options, the bytes queued past a limit, the windows; and freezing its sockets for the unsplice.

package ip

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
	"github.com/splicer/splicer/internal/sockopt"
)

// unsplicing reports whether a splice with opts may have to give the pair
// back in control mode: then the forwarder's sockets stay open, frozen,
// for the pair's whole time in the datapath.
func unsplicing(opts engine.Options) bool {
	return opts.HasLimits() || opts.HasWatch() || opts.For > 0 ||
		opts.Up.Mode == engine.Hold || opts.Down.Mode == engine.Hold
}

// supportsUnsplice refuses byte limits the datapath cannot express (one
// limit sequence number covers less than 2^31 bytes), and a direction
// forwarded to its end beside one held, watched or limited: the contract ends such a
// splice at the forwarded FIN (EndEOF) with the other direction in control
// mode, a half-closed pair whose sockets TCP_REPAIR cannot rebuild (it
// restores ESTABLISHED sockets only).
func supportsUnsplice(opts engine.Options) error {
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		o, other := opts.Dir(d), opts.Dir(d.Reverse())
		switch {
		case o.Mode == engine.Forward && o.Limit >= maxLimit:
			return fmt.Errorf("the %v limit of %d bytes is beyond what engine ip can stop at (%d)", d, o.Limit, maxLimit)
		case o.Mode == engine.Forward && o.Limit == 0 && (other.Mode != engine.Forward || other.Limit > 0):
			return fmt.Errorf("engine ip cannot end a splice at the %v FIN with the other direction in control mode (TCP_REPAIR rebuilds no half-closed socket)", d)
		}
	}
	return nil
}

// queuedPastBoundary checks, before anything is frozen, what
// prepareUnsplice checks after: a watched or held direction with bytes
// already unread on its source socket, or a limited one holding its whole
// limit there, cannot be spliced (the bytes only grow meanwhile), and
// saying so now spares the pair a hold and a grace period.
func queuedPastBoundary(p *engine.Pair, opts engine.Options) error {
	if !unsplicing(opts) {
		return nil
	}
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		o := opts.Dir(d)
		if o.Mode == engine.Forward && o.Limit == 0 {
			continue
		}
		inq, err := engine.Readable(p.Src(d))
		switch {
		case err != nil:
			return fmt.Errorf("SIOCINQ: %w", err)
		case o.Mode != engine.Forward && inq > 0:
			return fmt.Errorf("the %v direction is %v but %d bytes wait unread on its source socket", d, o.Mode, inq)
		case o.Mode == engine.Forward && o.Limit <= int64(inq):
			return fmt.Errorf("the %v limit of %d bytes is already in the forwarder's receive queue (%d)", d, o.Limit, inq)
		}
	}
	return nil
}

// windowsFit checks, for each direction a splice forwards up to a byte
// limit, that the receiver's window takes what the sender may send once
// spliced: what the forwarder's input socket still allows its sender (its
// last advertised right edge past rcv_nxt), which follows the bytes the
// forwarder owes the receiver (the output socket's send queue, the input
// socket's receive queue). A sender the forwarder gave a larger window
// than its receiver's (a pooled upstream connection whose window grew
// on earlier responses, a client connection just opened) would send
// past the receiver's window into the datapath, which drops such
// segments (the receiver would too): losses, a retransmission timeout per
// response. TCP lets no one take a window back, so such a pair is better
// left to an engine whose sockets buffer it. A splice without a limit
// runs on (its senders recover once), and is not refused.
func windowsFit(opts engine.Options, sa, sb tcprepair.State, w [2]tcprepair.Window) error {
	in := [2]tcprepair.State{sa, sb} // the socket each direction arrives on
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		if o := opts.Dir(d); o.Mode != engine.Forward || o.Limit == 0 {
			continue
		}
		src, dst := in[d], in[1-d]
		wSrc, wDst := w[d], w[1-d]
		owed := int64(dst.OutQ) + int64(src.InQ)
		allowed := int64(max(int32(wSrc.RcvWup+wSrc.RcvWnd-src.Params.RcvNxt), 0))
		// The sender's bytes come after the owed ones; past the
		// receiver's window, at most what it is allowed. (Owed bytes
		// past the window are the drain's: it sends them as the
		// window opens, and the sender hears of the window from it.)
		if past := min(allowed, owed+allowed-int64(wDst.SndWnd)); past > 0 {
			return fmt.Errorf("%w: the %v sender may send %d bytes past what the forwarder holds (%d owed), %d of them past the receiver's window (%d)", errWindowMismatch, d, allowed, owed, past, wDst.SndWnd)
		}
	}
	return nil
}

// errWindowMismatch marks a splice refused by windowsFit.
var errWindowMismatch = errors.New("the windows do not match")

// frozen is what unsplicing needs from splice time: the sockets' final
// readings, their windows, and whether their keepalive was on (it is
// turned off while frozen: a keepalive timeout would send a reset).
type frozen struct {
	s         [2]tcprepair.State // by side: 0 client, 1 upstream
	w         [2]tcprepair.Window
	keepalive [2]bool
}

// prepareUnsplice checks that two frozen sockets can be rebuilt later and
// sets the published spec's modes from opts: a byte limit becomes a limit
// sequence number (bytes the source socket holds unread, and those the
// program kept while the pair was held, count toward it, as the drain
// delivers them), a watched or held direction the program's watch (acks
// pass, data is kept back and reported).
func prepareUnsplice(opts *engine.Options, spec *datapath.PairSpec, sa, sb *tcprepair.State, kept *[2]keptRun) error {
	switch {
	case sa.Params.ECN || sb.Params.ECN:
		return errors.New("ECN was negotiated, and TCP_REPAIR cannot restore it for unsplicing")
	case sa.UsecTS || sb.UsecTS:
		return errors.New("microsecond timestamps, which TCP_REPAIR cannot restore for unsplicing")
	case sa.FINReceived || sb.FINReceived || kept[engine.Up].fin || kept[engine.Down].fin:
		return errors.New("a peer already sent its FIN, and TCP_REPAIR cannot restore CLOSE_WAIT for unsplicing")
	}
	// By direction: up's source is the client socket.
	unread := [2]int{sa.InQ + len(kept[engine.Up].data), sb.InQ + len(kept[engine.Down].data)}
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		o := opts.Dir(d)
		m := datapath.DirMode{Mode: engine.Forward}
		switch {
		case o.Mode == engine.Watch || o.Mode == engine.Hold:
			if unread[d] > 0 {
				return fmt.Errorf("the %v direction is %v but %d bytes wait unread on its source socket", d, o.Mode, unread[d])
			}
			m.Mode = engine.Watch
		case o.Limit > 0:
			if o.Limit <= int64(unread[d]) {
				return fmt.Errorf("the %v limit of %d bytes is already in the forwarder's receive queue (%d)", d, o.Limit, unread[d])
			}
			m.Limited, m.LimitSeq = true, spec.Dir(d).SndNxt+uint32(o.Limit-int64(unread[d]))
		}
		if d == engine.Up {
			spec.Up.DirMode = m
		} else {
			spec.Down.DirMode = m
		}
	}
	return nil
}

// freezeForUnsplice reads both sockets' windows and turns their keepalive
// off for the time they stay frozen.
func freezeForUnsplice(client, up *net.TCPConn, sa, sb tcprepair.State) (*frozen, error) {
	fz := &frozen{s: [2]tcprepair.State{sa, sb}}
	for i, c := range []*net.TCPConn{client, up} {
		w, err := tcprepair.ReadWindow(c)
		if err != nil {
			return nil, err
		}
		fz.w[i] = w
		err = sockopt.WithFD(c, func(fd int) error {
			on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
			if err != nil {
				return err
			}
			fz.keepalive[i] = on != 0
			return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 0)
		})
		if err != nil {
			return nil, fmt.Errorf("SO_KEEPALIVE: %w", err)
		}
	}
	return fz, nil
}
