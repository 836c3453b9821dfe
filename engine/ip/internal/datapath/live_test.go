// Live test: client, forwarder and server namespaces over veth, real TCP connections spliced through the program at tcx ingress, bulk data both ways, then FIN teardown to TIME_WAIT.

package datapath

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"

	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// liveNet is the lab topology in three namespaces: C <-(cf|fc)-> F <-(fs|sf)-> S.
type liveNet struct {
	c, f, s *testNS
	fc, fs  int // F's device indexes toward C and S
	tp      topo
}

func newLiveNet(t *testing.T, v6 bool) *liveNet {
	t.Helper()
	n := &liveNet{tp: topo4}
	if v6 {
		n.tp = topo6
	}
	n.c, n.s = newNS(t, nil), newNS(t, nil)
	n.f = newNS(t, func(*testNS) error { return nil })
	pfx := 24
	if v6 {
		pfx = 64
	}
	addr := func(ap netip.AddrPort) string { return fmt.Sprintf("%s/%d", ap.Addr(), pfx) }
	var err error
	n.f.do(func() {
		n.fc, err = vethInto("fc", "cf", n.c, addr(n.tp.fa))
		if err == nil {
			n.fs, err = vethInto("fs", "sf", n.s, addr(n.tp.fb))
		}
	})
	if err != nil {
		t.Fatalf("veth: %v", err)
	}
	n.c.do(func() { err = addrUp("cf", addr(n.tp.client)) })
	if err == nil {
		n.s.do(func() { err = addrUp("sf", addr(n.tp.server)) })
	}
	if err != nil {
		t.Fatalf("address: %v", err)
	}
	return n
}

// vethInto creates a veth pair in the current namespace, moves the far end
// into ns and gives the near end addr. It returns the near end's index.
func vethInto(near, far string, ns *testNS, addr string) (int, error) {
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: near}, PeerName: far}); err != nil {
		return 0, err
	}
	fl, err := netlink.LinkByName(far)
	if err != nil {
		return 0, err
	}
	if err := netlink.LinkSetNsFd(fl, int(ns.handle)); err != nil {
		return 0, err
	}
	if err := addrUp(near, addr); err != nil {
		return 0, err
	}
	l, err := netlink.LinkByName(near)
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}

func addrUp(name, addr string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr(addr)
	if err != nil {
		return err
	}
	a.Flags = unix.IFA_F_NODAD
	if err := netlink.AddrAdd(l, a); err != nil {
		return err
	}
	return netlink.LinkSetUp(l)
}

// csumErrors reads TcpInCsumErrors of the namespace it runs in.
func csumErrors() (int, error) {
	f, err := os.Open("/proc/thread-self/net/snmp")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, n := range names {
			if n == "InCsumErrors" && i < len(fields) {
				return strconv.Atoi(fields[i])
			}
		}
	}
	return 0, fmt.Errorf("no InCsumErrors in snmp")
}

// conns are the four sockets of a pair before splicing.
type conns struct {
	c, fa, fb, s *net.TCPConn
}

// connect builds connection A (C -> F:7000) and B (F -> S:8080) and moves
// a few bytes each way through F, as a proxy in control mode would.
func (n *liveNet) connect(t *testing.T) conns {
	t.Helper()
	var lnF, lnS *net.TCPListener
	var cs conns
	var err error
	n.s.do(func() { lnS, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(n.tp.server)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lnS.Close() })
	n.f.do(func() { lnF, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(n.tp.fa)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lnF.Close() })
	n.c.do(func() { cs.c, err = net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(n.tp.fa)) })
	if err != nil {
		t.Fatal(err)
	}
	if cs.fa, err = lnF.AcceptTCP(); err != nil {
		t.Fatal(err)
	}
	n.f.do(func() {
		local := net.TCPAddrFromAddrPort(netip.AddrPortFrom(n.tp.fb.Addr(), 0))
		cs.fb, err = net.DialTCP("tcp", local, net.TCPAddrFromAddrPort(n.tp.server))
	})
	if err != nil {
		t.Fatal(err)
	}
	if cs.s, err = lnS.AcceptTCP(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*net.TCPConn{cs.c, cs.fa, cs.fb, cs.s} {
		c.SetDeadline(time.Now().Add(10 * time.Second)) // a stall (e.g. bad checksums) fails, not hangs
		t.Cleanup(func() { c.Close() })
	}
	relay := func(from, via, to, dst *net.TCPConn, msg string) {
		if _, err := from.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(via, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := to.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(dst, buf); err != nil || string(buf) != msg {
			t.Fatalf("relay %q: got %q, %v", msg, buf, err)
		}
	}
	relay(cs.c, cs.fa, cs.fb, cs.s, "hello upstream")
	relay(cs.s, cs.fb, cs.fa, cs.c, "hello client, a longer greeting")
	waitIdle(t, cs.c, cs.fa, cs.fb, cs.s)
	return cs
}

// waitIdle waits until no socket has unacknowledged data, so that freezing
// loses nothing in flight.
func waitIdle(t *testing.T, cs ...*net.TCPConn) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range cs {
		for {
			n, err := engine.Unsent(c)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("socket still has %d unacknowledged bytes", n)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// freeze puts a socket in repair mode (it sends nothing from now on, not
// even on close) and reads what splicing needs from it.
func freeze(c *net.TCPConn, ifindex int, peer *net.TCPConn) (tcprepair.ConnParams, error) {
	p := tcprepair.ConnParams{
		Local:   c.LocalAddr().(*net.TCPAddr).AddrPort(),
		Remote:  c.RemoteAddr().(*net.TCPAddr).AddrPort(),
		Ifindex: ifindex,
	}
	err := sockopt.WithFD(c, func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_ON); err != nil {
			return fmt.Errorf("TCP_REPAIR: %w", err)
		}
		queueSeq := func(q int) (uint32, error) {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, q); err != nil {
				return 0, err
			}
			v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ)
			return uint32(v), err
		}
		var err error
		if p.WriteSeq, err = queueSeq(2); err != nil { // TCP_SEND_QUEUE
			return err
		}
		if p.RcvNxt, err = queueSeq(1); err != nil { // TCP_RECV_QUEUE
			return err
		}
		p.SndUna = p.WriteSeq // idle: everything sent was acknowledged
		info, err := tcprepair.RawTCPInfo(fd)
		if err != nil {
			return err
		}
		p.Timestamps, p.SACK, p.WScale, p.ECN = info[5]&1 != 0, info[5]&2 != 0, info[5]&4 != 0, info[5]&8 != 0
		p.SndWScale, p.RcvWScale = info[6]&0xf, info[6]>>4
		return nil
	})
	if err != nil {
		return p, err
	}
	if p.TSVal, err = tcprepair.TSClock(c); err != nil {
		return p, err
	}
	// The peer's clock now is at least any TSval it sent: good enough for
	// PAWS (a control plane learns it from DirStats.TSLast during hold).
	p.PeerTSVal, err = tcprepair.TSClock(peer)
	return p, err
}

func TestLive(t *testing.T) {
	for _, tc := range []struct {
		name     string
		v6       bool
		swCsum   bool   // F's devices compute checksums in software: checks the pseudo-header update of CHECKSUM_PARTIAL skbs
		fRmemMax string // F's tcp_rmem max, to make F's window scale differ from C's and S's
	}{
		{name: "ipv4"},
		{name: "ipv4 checksums in software on F", swCsum: true},
		{name: "ipv6 checksums in software on F, window scales differ", v6: true, swCsum: true, fRmemMax: "131072"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newLiveNet(t, tc.v6)
			var err error
			if tc.fRmemMax != "" {
				n.f.do(func() {
					err = os.WriteFile("/proc/sys/net/ipv4/tcp_rmem", []byte("4096 65536 "+tc.fRmemMax), 0)
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if tc.swCsum {
				if _, err := exec.LookPath("ethtool"); err != nil {
					testenv.SkipOrFail(t, "ethtool not installed (make deps installs it)")
				}
				n.f.do(func() {
					for _, dev := range []string{"fc", "fs"} {
						if out, e := exec.Command("ethtool", "-K", dev, "tx", "off").CombinedOutput(); e != nil {
							err = fmt.Errorf("ethtool %s: %v: %s", dev, e, out)
						}
					}
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			testLiveSplice(t, n)
		})
	}
}

func testLiveSplice(t *testing.T, n *liveNet) {
	cs := n.connect(t)
	dp, err := Load(Options{MaxPairs: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	n.f.do(func() {
		if err = dp.Attach(n.fc); err == nil {
			err = dp.Attach(n.fs)
		}
		if err == nil {
			err = dp.Attach(n.fc) // idempotent
		}
	})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}

	// Hold first, so nothing reaches the sockets while they freeze.
	a := Tuple{Src: cs.c.LocalAddr().(*net.TCPAddr).AddrPort(), Dst: cs.fa.LocalAddr().(*net.TCPAddr).AddrPort()}
	b := Tuple{Src: cs.s.LocalAddr().(*net.TCPAddr).AddrPort(), Dst: cs.fb.LocalAddr().(*net.TCPAddr).AddrPort()}
	hold := DirSpec{DirMode: DirMode{Mode: engine.Hold}}
	if err := dp.Insert(PairSpec{A: a, B: b, IfindexA: n.fc, IfindexB: n.fs, Up: hold, Down: hold}); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	pa, err := freeze(cs.fa, n.fc, cs.c)
	if err != nil {
		t.Fatalf("freeze A: %v", err)
	}
	pb, err := freeze(cs.fb, n.fs, cs.s)
	if err != nil {
		t.Fatalf("freeze B: %v", err)
	}
	spec, err := NewPairSpec(pa, pb)
	if err != nil {
		t.Fatalf("NewPairSpec: %v", err)
	}
	t.Logf("window shifts up %d->%d down %d->%d; timestamps %v, SACK %v",
		spec.Up.InShift, spec.Up.OutShift, spec.Down.InShift, spec.Down.OutShift, pa.Timestamps, pa.SACK)
	if err := dp.Update(spec); err != nil {
		t.Fatalf("Update: %v", err)
	}
	// Closing in repair mode sends nothing: the forwarder runs no TCP for the pair from now on.
	cs.fa.Close()
	cs.fb.Close()

	var csumBefore [2]int
	n.c.do(func() { csumBefore[0], _ = csumErrors() })
	n.s.do(func() { csumBefore[1], _ = csumErrors() })

	const size = 8 << 20
	data := make([]byte, size)
	rand.Read(data)
	echoed := make(chan error, 1)
	go func() { // the server echoes until EOF, then closes its side
		_, err := io.Copy(cs.s, cs.s)
		if err == nil {
			err = cs.s.CloseWrite()
		}
		echoed <- err
	}()
	wrote := make(chan error, 1)
	go func() {
		_, err := cs.c.Write(data)
		if err == nil {
			err = cs.c.CloseWrite()
		}
		wrote <- err
	}()
	got, err := io.ReadAll(cs.c)
	if err != nil {
		t.Fatalf("client read: %v (after %d bytes)", err, len(got))
	}
	if err := <-wrote; err != nil {
		t.Fatalf("client write: %v", err)
	}
	if err := <-echoed; err != nil {
		t.Fatalf("server echo: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("echo differs: %d bytes back of %d", len(got), len(data))
	}

	// The last ACK may still be on its way; the phase is observable state.
	var st PairStats
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, err = dp.Lookup(spec.A); err != nil {
			t.Fatal(err)
		}
		if st.Phase == PhaseTimeWait || time.Now().After(deadline) {
			break
		}
	}
	if st.Phase != PhaseTimeWait {
		t.Errorf("phase %v after both FINs and ACKs", st.Phase)
	}
	if st.Up.Bytes != size || st.Down.Bytes != size {
		t.Errorf("bytes up %d down %d, want %d each", st.Up.Bytes, st.Down.Bytes, size)
	}
	drops, err := dp.Drops()
	if err != nil {
		t.Fatal(err)
	}
	for reason, v := range drops {
		if v != 0 && reason != "hold" {
			t.Errorf("%d packets dropped as %s", v, reason)
		}
	}
	var csumAfter [2]int
	n.c.do(func() { csumAfter[0], _ = csumErrors() })
	n.s.do(func() { csumAfter[1], _ = csumErrors() })
	if csumAfter != csumBefore {
		t.Errorf("TCP checksum errors at client/server went from %v to %v", csumBefore, csumAfter)
	}
	c, _ := dp.Counters()
	t.Logf("forwarded %d packets (%d up, %d down) for %d bytes each way; drops %v", c["forwarded"], st.Up.Packets, st.Down.Packets, size, drops)
}
