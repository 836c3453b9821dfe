// TLS termination: the listener's certificates chosen by server name, reloaded in place, session tickets under rotating keys, and the handshake.

package httprev

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy"
)

// terminator is a listener's TLS side: the crypto/tls configuration every
// client connection's handshake uses, whose certificates come from store
// (GetCertificate), so that a reload swaps them without touching the
// configuration or a connection that already shook hands.
type terminator struct {
	cfg   *tls.Config
	certs []config.Certificate // the files store was read from
	store atomic.Pointer[certStore]
	keys  ticketKeys
}

// newTerminator reads t's certificates and starts rotating the session
// ticket keys (until close).
func newTerminator(t *config.TLS) (*terminator, error) {
	st, err := loadCertStore(t.Certificates)
	if err != nil {
		return nil, err
	}
	tt := &terminator{certs: t.Certificates}
	tt.store.Store(st)
	tt.cfg = &tls.Config{
		MinVersion: t.MinTLSVersion(),
		// HTTP/1.1 only: a client that offers h2 too gets http/1.1; one
		// that offers h2 alone is refused by the handshake.
		NextProtos:     []string{"http/1.1"},
		GetCertificate: tt.certificate,
		// Records of up to 16 KiB from a connection's first byte, as
		// HAProxy and nginx send them: crypto/tls otherwise cuts its
		// first 128 KiB into records of a segment, then two, and so on,
		// each its own seal and its own send, for a browser's first paint
		// at the cost of the proxy's CPU on every young connection.
		DynamicRecordSizingDisabled: true,
	}
	if err := tt.keys.start(tt.cfg, t.TicketRotation()); err != nil {
		return nil, err
	}
	return tt, nil
}

func (tt *terminator) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return tt.store.Load().pick(hello.ServerName), nil
}

// reload reads the certificate files again and returns what puts them in
// use: new handshakes get them, connections already open keep theirs.
// Nothing changes when a file cannot be read or a pair does not match.
func (tt *terminator) reload() (commit func(), err error) {
	st, err := loadCertStore(tt.certs)
	if err != nil {
		return nil, err
	}
	return func() { tt.store.Store(st) }, nil
}

func (tt *terminator) close() { tt.keys.stop() }

// handshake runs the TLS handshake with the client of s, bounded by
// deadline (zero: none) and by ctx.
func (tt *terminator) handshake(ctx context.Context, s proxy.Session, deadline time.Time) (*batchedTLS, error) {
	raw := s.Pair().Client
	if !deadline.IsZero() {
		raw.SetDeadline(deadline)
	}
	tc := newBatchedTLS(raw, tt.cfg)
	err := tc.HandshakeContext(ctx)
	raw.SetDeadline(time.Time{})
	if err != nil {
		return nil, handshakeFailed(err)
	}
	return tc, nil
}

// handshakeFailed is what Serve returns for a failed handshake: nil for a
// client that closed before finishing it (a TCP check, say), which ends
// the pair as eof, as a plain client that sends nothing does.
func handshakeFailed(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return &handshakeError{err}
}

// closeNotify tells the client of s, within a second, that no more
// comes (TLS close_notify); the socket is the forwarder's to close.
func (tt *terminator) closeNotify(s proxy.Session, tc *batchedTLS) {
	s.Pair().Client.SetWriteDeadline(time.Now().Add(time.Second))
	tc.CloseWrite()
}

// handshakeError: the client's TLS handshake failed (close reason
// bad_request, unless it timed out or the client went away).
type handshakeError struct{ err error }

func (e *handshakeError) Error() string { return "tls handshake: " + e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

// BadInput says a handshake that failed on what the client sent (no
// common version or protocol, a bad record) is the client's fault.
func (e *handshakeError) BadInput() bool {
	var ne net.Error
	return !errors.As(e.err, &ne) && !errors.Is(e.err, io.EOF) && !errors.Is(e.err, io.ErrUnexpectedEOF)
}

// certStore is one generation of a listener's certificates by the names
// they cover: exact names, "*.suffix" for one label, and the default.
type certStore struct {
	byName map[string]*tls.Certificate
	def    *tls.Certificate
}

// loadCertStore reads certs; the first is the default. A name two
// certificates cover goes to the first listed.
func loadCertStore(certs []config.Certificate) (*certStore, error) {
	st := &certStore{byName: map[string]*tls.Certificate{}}
	for _, c := range certs {
		pair, err := c.LoadPair()
		if err != nil {
			return nil, err
		}
		leaf := pair.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return nil, fmt.Errorf("%s: %w", c.CertFile, err)
			}
		}
		cert := &pair
		if st.def == nil {
			st.def = cert
		}
		names := leaf.DNSNames
		if len(names) == 0 && leaf.Subject.CommonName != "" {
			names = []string{leaf.Subject.CommonName}
		}
		for _, n := range names {
			n = strings.ToLower(n)
			if _, taken := st.byName[n]; !taken {
				st.byName[n] = cert
			}
		}
	}
	if st.def == nil {
		return nil, errors.New("no certificate")
	}
	return st, nil
}

// pick is the certificate for a client that asked for name (SNI): the
// one naming it, else the one whose "*.suffix" covers it, else the
// default.
func (st *certStore) pick(name string) *tls.Certificate {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if c, ok := st.byName[name]; ok {
		return c
	}
	if _, rest, ok := strings.Cut(name, "."); ok {
		if c, ok := st.byName["*."+rest]; ok {
			return c
		}
	}
	return st.def
}

// ticketKeys rotates the keys of a tls.Config's session tickets: a new
// key seals tickets every interval, and the keysKept-1 before it still
// open the tickets they sealed, so a ticket resumes for between
// (keysKept-1) and keysKept intervals. The keys live in memory only: a
// restart, or another worker, cannot resume a ticket.
type ticketKeys struct {
	mu   sync.Mutex
	cfg  *tls.Config
	keys [][32]byte // newest first
	quit chan struct{}
	done sync.WaitGroup
}

// keysKept is how many ticket keys open tickets: the current and two before.
const keysKept = 3

func (k *ticketKeys) start(cfg *tls.Config, every time.Duration) error {
	k.cfg = cfg
	if err := k.rotate(); err != nil {
		return err
	}
	k.quit = make(chan struct{})
	k.done.Add(1)
	go func() {
		defer k.done.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				k.rotate()
			case <-k.quit:
				return
			}
		}
	}()
	return nil
}

// rotate puts a new key first and drops the oldest past keysKept.
func (k *ticketKeys) rotate() error {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = append([][32]byte{key}, k.keys[:min(len(k.keys), keysKept-1)]...)
	k.cfg.SetSessionTicketKeys(k.keys)
	return nil
}

func (k *ticketKeys) stop() {
	if k.quit != nil {
		close(k.quit)
		k.done.Wait()
		k.quit = nil
	}
}

// upstreamTLS holds the TLS settings of the pools with a tls section. The
// connections to such a pool's servers go under a key (httpcore.Conn.Use's)
// that names the server's address, the pool and the name its certificate
// must carry, since two pools may reach one server with different
// settings, and a pool's servers may change (names re-resolved).
type upstreamTLS struct {
	byPool map[string]*poolTLS
	// configs caches a configuration per key, built at its first use.
	configs *sync.Map
}

// poolTLS is one pool's TLS settings: its servers' certificates must lead
// to roots (the host's when nil) and carry serverName, or else each
// server's own host name; its servers share one session cache, so that a
// new connection resumes a session where the server takes it.
type poolTLS struct {
	serverName string
	roots      *x509.CertPool
	insecure   bool
	cache      tls.ClientSessionCache
}

// newUpstreamTLS reads the tls section of each pool that has one.
func newUpstreamTLS(pools []config.Pool) (upstreamTLS, error) {
	out := upstreamTLS{byPool: map[string]*poolTLS{}, configs: &sync.Map{}}
	for _, pc := range pools {
		if pc.TLS == nil {
			continue
		}
		roots, err := pc.TLS.LoadCAs()
		if err != nil {
			return out, fmt.Errorf("pool %s: %w", pc.Name, err)
		}
		out.byPool[pc.Name] = &poolTLS{serverName: pc.TLS.ServerName, roots: roots,
			insecure: pc.TLS.InsecureSkipVerify, cache: tls.NewLRUClientSessionCache(len(pc.Servers) * 4)}
	}
	return out, nil
}

// any reports whether some pool speaks TLS to its servers.
func (u upstreamTLS) any() bool { return len(u.byPool) > 0 }

// tlsSep separates a key's address from its pool and server name; no
// address holds it.
const tlsSep = " tls "

// key is what connections to srv of pool go under: its address alone, or
// with the pool's name and the server's certificate name when the pool
// speaks TLS to it.
func (u upstreamTLS) key(pool string, srv *proxy.Server) string {
	pt := u.byPool[pool]
	if pt == nil {
		return srv.Addr
	}
	return srv.Addr + tlsSep + pool + " " + pt.nameOf(srv.Addr, srv.From)
}

// nameOf is the name the certificate of the server at addr must carry:
// the pool's server_name, else the host the server was given or found
// under.
func (pt *poolTLS) nameOf(addr, from string) string {
	if pt.serverName != "" {
		return pt.serverName
	}
	if from != "" {
		addr = from
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// config is the TLS configuration of the connections under key, nil for
// plain TCP.
func (u upstreamTLS) config(key string) *tls.Config {
	if c, ok := u.configs.Load(key); ok {
		return c.(*tls.Config)
	}
	_, rest, ok := strings.Cut(key, tlsSep)
	if !ok {
		return nil
	}
	pool, name, _ := strings.Cut(rest, " ")
	pt := u.byPool[pool]
	if pt == nil {
		return nil
	}
	c, _ := u.configs.LoadOrStore(key, pt.config(name))
	return c.(*tls.Config)
}

// config is a configuration for a server whose certificate carries name;
// HTTP/1.1 is asked for in ALPN.
func (pt *poolTLS) config(name string) *tls.Config {
	return &tls.Config{ServerName: name, RootCAs: pt.roots, InsecureSkipVerify: pt.insecure,
		NextProtos: []string{"http/1.1"}, ClientSessionCache: pt.cache, MinVersion: tls.VersionTLS12}
}

// checkDialer is dial followed by the TLS handshake for pool's servers,
// if it speaks TLS to them, so that their health checks speak it.
func (u upstreamTLS) checkDialer(pool *proxy.Pool, dial proxy.CheckDialer) proxy.CheckDialer {
	pt := u.byPool[pool.Name]
	if pt == nil || dial == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return c, err
		}
		tc := tls.Client(c, u.config(addr+tlsSep+pool.Name+" "+pt.nameOf(addr, fromOf(pool, addr))))
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		return tc, nil
	}
}

// fromOf is the name the server of pool at addr was found under, if any.
func fromOf(pool *proxy.Pool, addr string) string {
	for _, s := range pool.Servers() {
		if s.Addr == addr {
			return s.From
		}
	}
	return ""
}
