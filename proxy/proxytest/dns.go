// A name server for tests: it answers A, AAAA and SRV questions over UDP from records the test sets and changes, and SERVFAIL while told to fail.

package proxytest

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS is a UDP name server on loopback whose records a test changes while
// it runs, to show that what asks it follows them. A name it has no
// record for is answered NXDOMAIN.
type DNS struct {
	// Addr is the loopback host:port it listens on.
	Addr string
	// Queries counts the questions asked.
	Queries atomic.Int64

	mu    sync.Mutex // guards what follows
	addrs map[string][]netip.Addr
	srvs  map[string][]net.SRV
	fail  bool
}

// NewDNS starts a name server with no records until tb ends.
func NewDNS(tb testing.TB) *DNS {
	tb.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	d := &DNS{Addr: pc.LocalAddr().String(), addrs: map[string][]netip.Addr{}, srvs: map[string][]net.SRV{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.serve(pc)
	}()
	tb.Cleanup(func() { pc.Close(); <-done })
	return d
}

// SetAddrs makes ips name's A and AAAA records; none removes the name.
func (d *DNS) SetAddrs(name string, ips ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var as []netip.Addr
	for _, ip := range ips {
		as = append(as, netip.MustParseAddr(ip))
	}
	d.addrs[fqdn(name)] = as
}

// SetSRV makes recs name's SRV records.
func (d *DNS) SetSRV(name string, recs ...net.SRV) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.srvs[fqdn(name)] = recs
}

// Fail has every question answered SERVFAIL (on) or from the records
// again (!on).
func (d *DNS) Fail(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail = on
}

func fqdn(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) + "." }

func (d *DNS) serve(pc net.PacketConn) {
	buf := make([]byte, 4096)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, err := d.answer(buf[:n]); err == nil {
			pc.WriteTo(out, from)
		}
	}
}

// answer builds the reply to the query msg.
func (d *DNS) answer(msg []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	d.Queries.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	name := strings.ToLower(q.Name.String())
	ips, hasName := d.addrs[name]
	srvs, hasSRV := d.srvs[name]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	switch {
	case d.fail:
		rh.RCode = dnsmessage.RCodeServerFailure
	case !hasName && !hasSRV || (hasName && len(ips) == 0):
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	if rh.RCode == dnsmessage.RCodeSuccess {
		d.records(&b, q, ips, srvs)
	}
	return b.Finish()
}

// records adds the answers to q.
func (d *DNS) records(b *dnsmessage.Builder, q dnsmessage.Question, ips []netip.Addr, srvs []net.SRV) {
	rh := dnsmessage.ResourceHeader{Name: q.Name, Type: q.Type, Class: dnsmessage.ClassINET, TTL: 1}
	for _, ip := range ips {
		switch {
		case q.Type == dnsmessage.TypeA && ip.Is4():
			b.AResource(rh, dnsmessage.AResource{A: ip.As4()})
		case q.Type == dnsmessage.TypeAAAA && ip.Is6():
			b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: ip.As16()})
		}
	}
	if q.Type != dnsmessage.TypeSRV {
		return
	}
	for _, s := range srvs {
		b.SRVResource(rh, dnsmessage.SRVResource{Priority: s.Priority, Weight: s.Weight, Port: s.Port,
			Target: dnsmessage.MustNewName(fqdn(s.Target))})
	}
}
