// Datapath tests as data: input frame, expected frame and verdict, through the real program with Program.Run and through the Go reference.

package datapath

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

type tableCase struct {
	name    string
	v6      bool
	tweak   func(*PairSpec)
	in      func(t topo) packet.Seg
	want    func(t topo) packet.Seg // expected output; nil unless verdict is redirect
	verdict int32
	drop    string // expected drop reason when verdict is drop
	// wrongDevice: the frame arrives on the harness device that does not
	// lead to its source.
	wrongDevice bool
}

// Shorthands for the base spec's values (harness.baseSpec).
const (
	upNxt   = 1_000_000
	downNxt = 5_000_000
	upOff   = 1000
	downOff = 0x10000000
	upAcked = downNxt + downOff // what the client may ack: everything the forwarder sent it
)

// u32 wraps a constant expression into sequence space.
func u32(v int64) uint32 { return uint32(v) }

var payload = []byte("GET / HTTP/1.1\r\nHost: splicer\r\n\r\n")

func tableCases() []tableCase {
	return []tableCase{
		{
			name: "A->B data: addresses, ports, seq, ack",
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.PSH, Win: 1000, Payload: payload})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + upOff, Ack: downNxt, Flags: packet.ACK | packet.PSH, Win: 1000, Payload: payload})
			},
			verdict: verdictRedirect,
		},
		{
			name: "B->A data",
			in: func(t topo) packet.Seg {
				return t.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 500, Payload: payload})
			},
			want: func(t topo) packet.Seg {
				return t.downOut(packet.Seg{Seq: downNxt + downOff, Ack: upNxt, Flags: packet.ACK, Win: 500, Payload: payload})
			},
			verdict: verdictRedirect,
		},
		{
			name: "B->A data, IPv6",
			v6:   true,
			in: func(t topo) packet.Seg {
				return t.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 500, Payload: payload})
			},
			want: func(t topo) packet.Seg {
				return t.downOut(packet.Seg{Seq: downNxt + downOff, Ack: upNxt, Flags: packet.ACK, Win: 500, Payload: payload})
			},
			verdict: verdictRedirect,
		},
		{
			name: "ack only",
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt, Ack: upAcked - 10, Flags: packet.ACK, Win: 4000})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + upOff, Ack: downNxt - 10, Flags: packet.ACK, Win: 4000})
			},
			verdict: verdictRedirect,
		},
		{
			name: "timestamps after two NOPs: TSval + TSOff, TSecr - peer TSOff",
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), packet.OptTS(100, 9000+7000)), Payload: payload})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + upOff, Ack: downNxt, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), packet.OptTS(600, 7000)), Payload: payload})
			},
			verdict: verdictRedirect,
		},
		{
			name: "timestamps at an odd offset, IPv6",
			v6:   true,
			in: func(t topo) packet.Seg {
				return t.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptTS(0xfffffff0, 600)), Payload: payload})
			},
			want: func(t topo) packet.Seg {
				return t.downOut(packet.Seg{Seq: downNxt + downOff, Ack: upNxt, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptTS(9000-0x10, 100)), Payload: payload})
			},
			verdict: verdictRedirect,
		},
		{
			name: "SACK, 1 block: edges in the peer's space",
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt, Ack: upAcked - 3000, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), packet.OptSACK(upAcked-2000, upAcked-1000))})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + upOff, Ack: downNxt - 3000, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), packet.OptSACK(downNxt-2000, downNxt-1000))})
			},
			verdict: verdictRedirect,
		},
		{
			name: "SACK, 4 blocks",
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt, Ack: upAcked - 9000, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(),
					packet.OptSACK(upAcked-8000, upAcked-7000, upAcked-6000, upAcked-5000, upAcked-4000, upAcked-3000, upAcked-2000, upAcked-1000))})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + upOff, Ack: downNxt - 9000, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(),
					packet.OptSACK(downNxt-8000, downNxt-7000, downNxt-6000, downNxt-5000, downNxt-4000, downNxt-3000, downNxt-2000, downNxt-1000))})
			},
			verdict: verdictRedirect,
		},
		{
			name: "SACK, 3 blocks after timestamps, at an odd offset",
			in: func(t topo) packet.Seg {
				return t.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff - 900, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptTS(5, 600), packet.OptNOP(),
					packet.OptSACK(upNxt+upOff-800, upNxt+upOff-700, upNxt+upOff-600, upNxt+upOff-500, upNxt+upOff-400, upNxt+upOff-300))})
			},
			want: func(t topo) packet.Seg {
				return t.downOut(packet.Seg{Seq: downNxt + downOff, Ack: upNxt - 900, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptTS(9005, 100), packet.OptNOP(),
					packet.OptSACK(upNxt-800, upNxt-700, upNxt-600, upNxt-500, upNxt-400, upNxt-300))})
			},
			verdict: verdictRedirect,
		},
		{
			name: "MSS, unknown options and URG pass unchanged",
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.URG, Urg: 3, Win: 9, Opts: packet.Cat(packet.OptMSS(1400), packet.OptUnknown(253, 1, 2, 3, 4)), Payload: payload})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + upOff, Ack: downNxt, Flags: packet.ACK | packet.URG, Urg: 3, Win: 9, Opts: packet.Cat(packet.OptMSS(1400), packet.OptUnknown(253, 1, 2, 3, 4)), Payload: payload})
			},
			verdict: verdictRedirect,
		},
		{
			name:  "window scaled down: sender shift 2, receiver expects 7, rounded down",
			tweak: func(s *PairSpec) { s.Up.InShift, s.Up.OutShift = 2, 7 },
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 1000})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + upOff, Ack: downNxt, Flags: packet.ACK, Win: 1000 << 2 >> 7})
			},
			verdict: verdictRedirect,
		},
		{
			name:  "window scaled up: sender shift 9, receiver without scaling, clamped to 65535",
			tweak: func(s *PairSpec) { s.Down.InShift, s.Down.OutShift = 9, 0 },
			in: func(t topo) packet.Seg {
				return t.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 1000})
			},
			want: func(t topo) packet.Seg {
				return t.downOut(packet.Seg{Seq: downNxt + downOff, Ack: upNxt, Flags: packet.ACK, Win: 65535})
			},
			verdict: verdictRedirect,
		},
		{
			name:  "window scaled up, not clamped: shift 7 to 3",
			tweak: func(s *PairSpec) { s.Down.InShift, s.Down.OutShift = 7, 3 },
			in: func(t topo) packet.Seg {
				return t.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 100})
			},
			want: func(t topo) packet.Seg {
				return t.downOut(packet.Seg{Seq: downNxt + downOff, Ack: upNxt, Flags: packet.ACK, Win: 1600})
			},
			verdict: verdictRedirect,
		},
		{
			name: "sequence numbers wrap at 2^32",
			tweak: func(s *PairSpec) {
				s.Up.SndNxt, s.Up.SeqOff = 0xffffff00, 0x200
				s.Down.AckHi = 0x100
			},
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: 0xffffff00, Ack: upAcked, Flags: packet.ACK, Win: 1, Payload: payload})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: 0x100, Ack: downNxt, Flags: packet.ACK, Win: 1, Payload: payload})
			},
			verdict: verdictRedirect,
		},
		{
			name:  "timestamps stripped for a receiver that did not negotiate them",
			tweak: func(s *PairSpec) { s.Up.StripTS = true },
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), packet.OptTS(1, 2))})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + upOff, Ack: downNxt, Flags: packet.ACK, Win: 9, Opts: bytes.Repeat(packet.OptNOP(), 12)})
			},
			verdict: verdictRedirect,
		},
		{
			name:  "SACK stripped for a receiver that did not negotiate it",
			tweak: func(s *PairSpec) { s.Down.StripSACK = true },
			in: func(t topo) packet.Seg {
				return t.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 9, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), packet.OptSACK(upNxt+upOff-20, upNxt+upOff-10))})
			},
			want: func(t topo) packet.Seg {
				return t.downOut(packet.Seg{Seq: downNxt + downOff, Ack: upNxt, Flags: packet.ACK, Win: 9, Opts: bytes.Repeat(packet.OptNOP(), 12)})
			},
			verdict: verdictRedirect,
		},
		{
			name: "IPv4 options and Ethernet padding are kept",
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 3, IPOpts: []byte{1, 1, 1, 0}, Pad: 6})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + upOff, Ack: downNxt, Flags: packet.ACK, Win: 3, IPOpts: []byte{1, 1, 1, 0}, Pad: 6})
			},
			verdict: verdictRedirect,
		},
		{
			name: "retransmission far behind but within the window",
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: u32(upNxt - 60000<<7), Ack: upAcked, Flags: packet.ACK, Win: 9, Payload: payload})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: u32(upNxt - 60000<<7 + upOff), Ack: downNxt, Flags: packet.ACK, Win: 9, Payload: payload})
			},
			verdict: verdictRedirect,
		},
		{
			name: "RST+ACK outside the acceptable range is forwarded (the receiver answers with a challenge ACK)",
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt + 5000, Ack: upAcked, Flags: packet.RST | packet.ACK})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + 5000 + upOff, Ack: downNxt, Flags: packet.RST | packet.ACK})
			},
			verdict: verdictRedirect,
		},
		{
			name: "data starting at the edge of the receiver's window (ack + 65535 << 7 seeded) is forwarded: a zero-window probe starts there",
			in: func(t topo) packet.Seg {
				return t.up(packet.Seg{Seq: upNxt + 65535<<7, Ack: upAcked, Flags: packet.ACK, Win: 9, Payload: []byte{'x'}})
			},
			want: func(t topo) packet.Seg {
				return t.upOut(packet.Seg{Seq: upNxt + 65535<<7 + upOff, Ack: downNxt, Flags: packet.ACK, Win: 9, Payload: []byte{'x'}})
			},
			verdict: verdictRedirect,
		},

		// Drops.
		{name: "data starting one byte past the receiver's window (inside the span around snd_nxt)", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt + 65535<<7 + 1, Ack: upAcked, Flags: packet.ACK, Win: 9, Payload: payload})
		}, verdict: verdictDrop, drop: "seq_out_of_window"},
		{name: "FIN past the receiver's window, IPv6", v6: true, in: func(t topo) packet.Seg {
			return t.down(packet.Seg{Seq: downNxt + 65535<<7 + 1, Ack: upNxt + upOff, Flags: packet.ACK | packet.FIN, Win: 9})
		}, verdict: verdictDrop, drop: "seq_out_of_window"},
		{name: "data past a narrower receiver's window: the receiver's own scale (3), not the sender's", tweak: func(s *PairSpec) { s.Down.InShift = 3 }, in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt + 65535<<3 + 1, Ack: upAcked, Flags: packet.ACK, Win: 9, Payload: payload})
		}, verdict: verdictDrop, drop: "seq_out_of_window"},
		{name: "SYN on a spliced tuple", in: func(t topo) packet.Seg { return t.up(packet.Seg{Seq: 1, Flags: packet.SYN, Win: 9}) }, verdict: verdictDrop, drop: "syn_on_spliced"},
		{name: "SYN-ACK on a spliced tuple", in: func(t topo) packet.Seg {
			return t.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.SYN | packet.ACK})
		}, verdict: verdictDrop, drop: "syn_on_spliced"},
		{name: "blind RST far outside the window", in: func(t topo) packet.Seg { return t.up(packet.Seg{Seq: upNxt + 1<<30, Flags: packet.RST}) }, verdict: verdictDrop, drop: "seq_out_of_window"},
		{name: "blind data injection behind the window", v6: true, in: func(t topo) packet.Seg {
			return t.down(packet.Seg{Seq: u32(downNxt - 70000<<7), Ack: upNxt + upOff, Flags: packet.ACK, Payload: payload})
		}, verdict: verdictDrop, drop: "seq_out_of_window"},
		{name: "ack of data never sent", in: func(t topo) packet.Seg { return t.up(packet.Seg{Seq: upNxt, Ack: upAcked + 1, Flags: packet.ACK}) }, verdict: verdictDrop, drop: "ack_out_of_window"},
		{name: "ack more than a window behind", in: func(t topo) packet.Seg {
			return t.down(packet.Seg{Seq: downNxt, Ack: u32(upNxt + upOff - 65537<<7), Flags: packet.ACK})
		}, verdict: verdictDrop, drop: "ack_out_of_window"},
		{name: "data without ACK", in: func(t topo) packet.Seg { return t.up(packet.Seg{Seq: upNxt, Flags: packet.PSH, Payload: payload}) }, verdict: verdictDrop, drop: "no_ack"},
		{name: "hold", tweak: func(s *PairSpec) { s.Up.Mode = engine.Hold }, in: func(t topo) packet.Seg { return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK}) }, verdict: verdictDrop, drop: "hold"},
		{name: "truncated TCP header", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Cut: packet.EthLen + 20 + 12})
		}, verdict: verdictDrop, drop: "malformed"},
		{name: "IP length shorter than a TCP header", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, IPLenFix: -4})
		}, verdict: verdictDrop, drop: "malformed"},
		{name: "IP length longer than the frame", v6: true, in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, IPLenFix: 1})
		}, verdict: verdictDrop, drop: "malformed"},
		{name: "data offset below 5", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Doff: 4, Payload: payload})
		}, verdict: verdictDrop, drop: "malformed"},
		{name: "data offset past the packet", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Doff: 15})
		}, verdict: verdictDrop, drop: "malformed"},
		{name: "option overruns the header", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Opts: []byte{1, 1, 253, 9}})
		}, verdict: verdictDrop, drop: "malformed"},
		{name: "timestamp option of the wrong length", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), []byte{8, 6, 0, 0, 0, 0})})
		}, verdict: verdictDrop, drop: "malformed"},
		{name: "two timestamp options", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Opts: packet.Cat(packet.OptTS(1, 2), packet.OptTS(1, 2))})
		}, verdict: verdictDrop, drop: "malformed"},
		{name: "larger than the peer device's MTU", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Payload: make([]byte, 1461)})
		}, verdict: verdictDrop, drop: "mtu_exceeded"},
		{name: "IPv4 first fragment of a spliced flow", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, MF: true, Payload: payload})
		}, verdict: verdictDrop, drop: "fragment"},
		// A spliced flow's segment on the device that does not lead to its
		// sender: forged on another link, so neither translated nor kept.
		{name: "client data on the server's device", wrongDevice: true, in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.PSH, Win: 1000, Payload: payload})
		}, verdict: verdictDrop, drop: "wrong_device"},
		{name: "server data on the client's device, IPv6", v6: true, wrongDevice: true, in: func(t topo) packet.Seg {
			return t.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 500, Payload: payload})
		}, verdict: verdictDrop, drop: "wrong_device"},
		{name: "reset at the next byte on the wrong device", wrongDevice: true, in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.RST | packet.ACK})
		}, verdict: verdictDrop, drop: "wrong_device"},
		{name: "SYN on a spliced tuple on the wrong device", wrongDevice: true, in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: 1, Flags: packet.SYN, Win: 9})
		}, verdict: verdictDrop, drop: "wrong_device"},
		{name: "held segment on the wrong device", wrongDevice: true, tweak: func(s *PairSpec) { s.Up.Mode = engine.Hold }, in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK})
		}, verdict: verdictDrop, drop: "wrong_device"},
		// Not ours: passed untouched to the next program or the stack.
		{name: "another client's flow passes", in: func(t topo) packet.Seg {
			return t.withPort(40001).up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK})
		}, verdict: verdictPass},
		{name: "another client's flow passes on any device", wrongDevice: true, in: func(t topo) packet.Seg {
			return t.withPort(40001).up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK})
		}, verdict: verdictPass},
		{name: "another client's SYN passes", v6: true, in: func(t topo) packet.Seg { return t.withPort(40001).up(packet.Seg{Seq: 1, Flags: packet.SYN}) }, verdict: verdictPass},
		{name: "a later IPv4 fragment passes", in: func(t topo) packet.Seg {
			return t.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, FragOff: 100, Payload: payload})
		}, verdict: verdictPass},
		{name: "the forwarder's own flow to the server's other port passes", in: func(t topo) packet.Seg {
			s := t.down(packet.Seg{Flags: packet.ACK})
			s.Src = t.server
			s.Src = packet.WithPort(s.Src, 9999)
			return s
		}, verdict: verdictPass},
	}
}

// TestTable runs every case through the program and the Go reference and
// checks both against the expected verdict, drop reason and frame; every
// redirected frame's checksums are verified by full recomputation.
func TestTable(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 512})
	for _, tc := range tableCases() {
		t.Run(tc.name, func(t *testing.T) {
			tp := topo4
			if tc.v6 {
				tp = topo6
			}
			spec := h.baseSpec(tp)
			if tc.tweak != nil {
				tc.tweak(&spec)
			}
			if spec.B.Src.Addr().Is4() != spec.A.Src.Addr().Is4() {
				t.Fatal("bad case: families differ")
			}
			h.insert(spec)
			defer h.dp.Delete(spec.A)
			ref := newRefModel()
			ref.insert(spec, 0)
			ref.mtu = 1500 // the harness devices'

			in := tc.in(tp).Bytes()
			dev := h.deviceOf(in)
			if tc.wrongDevice {
				dev = h.otherDevice(dev)
			}
			before := h.drops()
			verdict, out := h.runOn(in, dev)
			drop := dropDelta(before, h.drops())
			refVerdict, refOut := ref.run(in, dev)

			if verdict != tc.verdict {
				t.Fatalf("program verdict %d (drop %q), want %d", verdict, drop, tc.verdict)
			}
			if refVerdict != tc.verdict {
				t.Fatalf("reference verdict %d (drops %v), want %d", refVerdict, ref.drops, tc.verdict)
			}
			if want := tc.drop; drop != want {
				t.Errorf("program counted drop %q, want %q", drop, want)
			}
			if tc.drop != "" && ref.drops[tc.drop] != 1 {
				t.Errorf("reference drops %v, want one %q", ref.drops, tc.drop)
			}
			switch tc.verdict {
			case verdictPass:
				if !bytes.Equal(out, in) {
					t.Errorf("passed frame was modified:\n got %s\nwant %s", hex.EncodeToString(out), hex.EncodeToString(in))
				}
			case verdictRedirect:
				want := tc.want(tp).Bytes()
				if err := packet.CheckChecksums(out); err != nil {
					t.Errorf("program output: %v", err)
				}
				if !bytes.Equal(out, want) {
					t.Errorf("program output differs:\n got %s\nwant %s", hex.EncodeToString(out), hex.EncodeToString(want))
				}
				if !bytes.Equal(refOut, want) {
					t.Errorf("reference output differs:\n got %s\nwant %s", hex.EncodeToString(refOut), hex.EncodeToString(want))
				}
			}
		})
	}
}
