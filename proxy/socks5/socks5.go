// Package socks5 is the authenticating gateway (class 2 in the papers): an RFC 1928 SOCKS5 server that splices each pair once it has connected.
//
// The proxy reads the client's greeting, authenticates it (RFC 1929
// username/password against hashed passwords, inline or in an htpasswd
// users_file read again on every reload, or no authentication when the
// listener has no users), reads a CONNECT request for an IPv4, IPv6 or
// domain-name destination, connects there, answers with the reply and hands
// the pair to the listener's engine: after the reply only forwarding is left.
//
// Every handshake read takes exactly the bytes the protocol says, so
// nothing the client sent after its request is left in a user-space buffer
// when the pair is spliced.
//
// What a client gets for what it sends:
//
//	version other than 5               connection closed
//	no acceptable method               method 0xFF, closed
//	wrong user or password             RFC 1929 status 0x01, closed, no upstream connection
//	BIND, UDP ASSOCIATE, other command reply 0x07 command not supported
//	unknown address type               reply 0x08 address type not supported
//	connection refused                 reply 0x05
//	network unreachable                reply 0x03
//	host unreachable, timeout, no DNS  reply 0x04
//	any other connect failure          reply 0x01 general failure
package socks5

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/proxyproto"
	"github.com/splicer/splicer/proxy/socks5/passwd"
)

// DefaultHandshakeTimeout bounds a handshake when the configuration does not.
const DefaultHandshakeTimeout = config.DefaultSOCKS5HandshakeTimeout

// Protocol constants of RFC 1928 and RFC 1929.
const (
	version5 = 0x05

	methodNoAuth       = 0x00
	methodUserPass     = 0x02
	methodNoAcceptable = 0xFF

	userPassVersion = 0x01
	userPassOK      = 0x00
	userPassFailed  = 0x01

	cmdConnect = 0x01

	atypIPv4   = 0x01
	atypDomain = 0x03
	atypIPv6   = 0x04
)

// Reply codes of RFC 1928 section 6.
const (
	RepSucceeded            = 0x00
	RepGeneralFailure       = 0x01
	RepNotAllowed           = 0x02
	RepNetworkUnreachable   = 0x03
	RepHostUnreachable      = 0x04
	RepConnectionRefused    = 0x05
	RepTTLExpired           = 0x06
	RepCommandNotSupported  = 0x07
	RepAddrTypeNotSupported = 0x08
)

// Proxy serves SOCKS5 clients.
type Proxy struct {
	// users checks RFC 1929 credentials; nil accepts clients without
	// authentication. A reload swaps it when the users come from a file.
	users atomic.Pointer[passwd.Verifier]
	// usersFile is the htpasswd file users come from, if any.
	usersFile string
	// HandshakeTimeout bounds everything before the reply; 0 means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a spliced pair when nothing moved for this long; 0 never.
	IdleTimeout time.Duration
	// ProxyProtocol ("v1", "v2" or empty) sends a PROXY protocol header to
	// the destination before any client byte.
	ProxyProtocol string
	// Resolve looks up a domain-name destination; nil uses net.DefaultResolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
}

// FromConfig builds the proxy of a socks5 listener, reading its
// users_file if it has one.
func FromConfig(lc config.Listener) (proxy.Proxy, error) {
	p := &Proxy{IdleTimeout: lc.IdleTimeout.Std(), ProxyProtocol: lc.ProxyProtocol}
	if lc.SOCKS5 == nil {
		return p, nil
	}
	p.HandshakeTimeout = lc.SOCKS5.HandshakeTimeout.Std()
	p.usersFile = lc.SOCKS5.UsersFile
	users := lc.SOCKS5.Users
	if p.usersFile != "" {
		var err error
		if users, err = config.ReadUsersFile(p.usersFile); err != nil {
			return nil, fmt.Errorf("socks5 users_file: %w", err)
		}
	}
	if len(users) > 0 {
		v, err := verifier(users)
		if err != nil {
			return nil, err
		}
		p.SetUsers(v)
	}
	return p, nil
}

// SetUsers has the proxy check credentials against v (nil: accept clients
// without authentication).
func (p *Proxy) SetUsers(v *passwd.Verifier) { p.users.Store(v) }

// ReloadFiles implements proxy.FileReloader: the users_file is read
// again, for new handshakes; a file that cannot be read or holds a bad
// line refuses the reload and the users in use stay.
func (p *Proxy) ReloadFiles() (commit func(), err error) {
	if p.usersFile == "" {
		return func() {}, nil
	}
	users, err := config.ReadUsersFile(p.usersFile)
	if err != nil {
		return nil, fmt.Errorf("socks5 users_file: %w", err)
	}
	v, err := verifier(users)
	if err != nil {
		return nil, fmt.Errorf("socks5 users_file %s: %w", p.usersFile, err)
	}
	return func() { p.SetUsers(v) }, nil
}

func verifier(users []config.SOCKS5User) (*passwd.Verifier, error) {
	m := make(map[string]string, len(users))
	for _, u := range users {
		m[u.Name] = u.PasswordHash
	}
	return passwd.NewVerifier(m)
}

// Errors a handshake ends with; the forwarder counts them as proxy errors.
var (
	ErrVersion    = errors.New("socks5: not a SOCKS5 client")
	ErrNoMethod   = errors.New("socks5: no acceptable authentication method")
	ErrAuthFailed = errors.New("socks5: authentication failed")
	ErrCommand    = errors.New("socks5: command not supported")
	ErrAddrType   = errors.New("socks5: address type not supported")
)

// Serve implements proxy.Proxy.
func (p *Proxy) Serve(ctx context.Context, s proxy.Session) error {
	c := s.Pair().Client
	timeout := p.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	deadline := time.Now().Add(timeout)
	c.SetDeadline(deadline)
	up, err := p.handshake(ctx, s, timeout, deadline)
	if ctx.Err() != nil {
		return ctx.Err() // shutting down: whatever failed, failed because of it
	}
	if err != nil {
		return err
	}
	if err := writeReply(c, RepSucceeded, up.LocalAddr()); err != nil {
		return err
	}
	c.SetDeadline(time.Time{})
	r, err := s.Splice(ctx, engine.Both(p.IdleTimeout))
	if err != nil {
		return err
	}
	return proxy.EndErr(r)
}

// handshake authenticates the client, reads its request and connects to the
// destination; on failure the client has had its reply.
func (p *Proxy) handshake(ctx context.Context, s proxy.Session, timeout time.Duration, deadline time.Time) (*net.TCPConn, error) {
	c := s.Pair().Client
	// A shutdown ends a handshake at once rather than after the timeout.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	user, err := p.authenticate(ctx, c, deadline)
	if err != nil {
		return nil, err
	}
	if user != "" {
		s.Log().Debug("socks5 user authenticated", "user", user)
	}
	dst, err := readRequest(c)
	if err != nil {
		if errors.Is(err, ErrVersion) || isReadError(err) {
			return nil, err // not a SOCKS5 request we could answer
		}
		return nil, fail(c, replyFor(err), err)
	}
	up, err := p.connect(ctx, s, dst, timeout)
	if err != nil {
		s.Log().Info("socks5 connect failed", "destination", dst.String(), "err", err)
		return nil, fail(c, replyFor(err), err)
	}
	if err := proxyproto.Send(p.ProxyProtocol, s.Pair(), up); err != nil {
		return nil, fail(c, RepGeneralFailure, err)
	}
	return up, nil
}

// authenticate reads the greeting, picks a method and, for username/password,
// checks the credentials (waiting, within the handshake's deadline, for
// one of the bounded check slots). It returns the user name ("" without
// authentication).
func (p *Proxy) authenticate(ctx context.Context, c *net.TCPConn, deadline time.Time) (string, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return "", fmt.Errorf("socks5 greeting: %w", err)
	}
	if hdr[0] != version5 {
		return "", badInput{fmt.Errorf("%w (version byte %#x)", ErrVersion, hdr[0])}
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return "", fmt.Errorf("socks5 greeting: %w", err)
	}
	users := p.users.Load()
	want := byte(methodNoAuth)
	if users != nil {
		want = methodUserPass
	}
	if !contains(methods, want) {
		c.Write([]byte{version5, methodNoAcceptable})
		return "", closeAfterReply(c, ErrNoMethod)
	}
	if _, err := c.Write([]byte{version5, want}); err != nil {
		return "", err
	}
	if want == methodNoAuth {
		return "", nil
	}
	user, pass, err := readUserPass(c)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	ok, err := users.CheckContext(ctx, user, pass)
	cancel()
	if err != nil {
		return "", fmt.Errorf("socks5: no password check slot before the handshake timeout: %w", err)
	}
	if !ok {
		c.Write([]byte{userPassVersion, userPassFailed})
		return "", closeAfterReply(c, fmt.Errorf("%w for user %q", ErrAuthFailed, user))
	}
	_, err = c.Write([]byte{userPassVersion, userPassOK})
	return user, err
}

func contains(b []byte, x byte) bool {
	for _, y := range b {
		if y == x {
			return true
		}
	}
	return false
}

// readUserPass reads an RFC 1929 username/password request.
func readUserPass(c io.Reader) (user, pass string, err error) {
	var ver [1]byte
	if _, err := io.ReadFull(c, ver[:]); err != nil {
		return "", "", fmt.Errorf("socks5 auth: %w", err)
	}
	if ver[0] != userPassVersion {
		return "", "", badInput{fmt.Errorf("socks5 auth: version %#x, want 1", ver[0])}
	}
	if user, err = readString(c); err == nil {
		pass, err = readString(c)
	}
	if err != nil {
		return "", "", fmt.Errorf("socks5 auth: %w", err)
	}
	return user, pass, nil
}

// readString reads a length-prefixed string.
func readString(c io.Reader) (string, error) {
	var n [1]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return "", err
	}
	b := make([]byte, n[0])
	_, err := io.ReadFull(c, b)
	return string(b), err
}

// destination is where a client asked to connect: an address or a name.
type destination struct {
	addr netip.Addr // valid unless the client gave a name
	name string
	port uint16
}

func (d destination) String() string {
	if d.addr.IsValid() {
		return netip.AddrPortFrom(d.addr, d.port).String()
	}
	return net.JoinHostPort(d.name, strconv.Itoa(int(d.port)))
}

// requestError carries the reply code a malformed or unsupported request gets.
type requestError struct {
	rep byte
	err error
}

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// BadInput counts a refused request as the client's fault (close reason
// bad_request).
func (e *requestError) BadInput() bool { return true }

// badInput marks a protocol violation for the close reason bad_request.
type badInput struct{ error }

func (e badInput) BadInput() bool { return true }
func (e badInput) Unwrap() error  { return e.error }

// readRequest reads a request and returns its destination if it is a
// CONNECT. The whole request is read even when it is refused, so that the
// reply is not lost to a reset for unread data.
func readRequest(c io.Reader) (destination, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return destination{}, fmt.Errorf("socks5 request: %w", err)
	}
	if hdr[0] != version5 {
		return destination{}, badInput{fmt.Errorf("%w (request version %#x)", ErrVersion, hdr[0])}
	}
	var d destination
	switch hdr[3] {
	case atypIPv4, atypIPv6:
		b := make([]byte, 4)
		if hdr[3] == atypIPv6 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return d, fmt.Errorf("socks5 request: %w", err)
		}
		d.addr, _ = netip.AddrFromSlice(b)
	case atypDomain:
		name, err := readString(c)
		if err != nil {
			return d, fmt.Errorf("socks5 request: %w", err)
		}
		d.name = name
		if name == "" {
			// Found by FuzzRequest: a zero-length name is no destination.
			var port [2]byte
			io.ReadFull(c, port[:])
			return d, &requestError{RepGeneralFailure, errors.New("socks5 request: empty destination name")}
		}
	default:
		return d, &requestError{RepAddrTypeNotSupported, fmt.Errorf("%w: %#x", ErrAddrType, hdr[3])}
	}
	var port [2]byte
	if _, err := io.ReadFull(c, port[:]); err != nil {
		return d, fmt.Errorf("socks5 request: %w", err)
	}
	d.port = binary.BigEndian.Uint16(port[:])
	if hdr[1] != cmdConnect {
		return d, &requestError{RepCommandNotSupported, fmt.Errorf("%w: %s", ErrCommand, commandName(hdr[1]))}
	}
	return d, nil
}

func commandName(cmd byte) string {
	switch cmd {
	case 0x02:
		return "BIND"
	case 0x03:
		return "UDP ASSOCIATE"
	}
	return fmt.Sprintf("command %#x", cmd)
}

// errResolve marks a destination name that did not resolve.
var errResolve = errors.New("socks5: destination name did not resolve")

// connect dials the destination, each of a name's addresses in turn.
func (p *Proxy) connect(ctx context.Context, s proxy.Session, d destination, timeout time.Duration) (*net.TCPConn, error) {
	addrs := []netip.Addr{d.addr}
	if !d.addr.IsValid() {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		if addrs, err = p.resolve(rctx, d.name); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errResolve, d.name, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("%w: %s: no addresses", errResolve, d.name)
		}
	}
	var errs []error
	for _, a := range addrs {
		dctx := ctx
		if d.name != "" {
			dctx = proxy.WithDestinationName(ctx, d.name)
		}
		up, err := s.Dial(dctx, netip.AddrPortFrom(a.Unmap(), d.port).String())
		if err == nil {
			return up, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func (p *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if p.Resolve != nil {
		return p.Resolve(ctx, host)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// replyFor maps why a request failed to its reply code.
func replyFor(err error) byte {
	var re *requestError
	switch {
	case errors.As(err, &re):
		return re.rep
	case errors.Is(err, proxy.ErrDestinationDenied):
		return RepNotAllowed
	case errors.Is(err, syscall.ECONNREFUSED):
		return RepConnectionRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return RepNetworkUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, errResolve), errors.Is(err, proxy.ErrUpstreamTimeout):
		return RepHostUnreachable
	}
	return RepGeneralFailure
}

// writeReply sends a reply whose bound address is bound (the upstream
// connection's local address on success, zeros otherwise).
func writeReply(c io.Writer, rep byte, bound net.Addr) error {
	ap := netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	if ta, ok := bound.(*net.TCPAddr); ok && ta != nil {
		ap = ta.AddrPort()
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	b := []byte{version5, rep, 0x00, atypIPv4}
	if ap.Addr().Is6() {
		b[3] = atypIPv6
	}
	b = append(b, ap.Addr().AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, ap.Port())
	_, err := c.Write(b)
	return err
}

// fail answers a request with rep and closes the connection.
func fail(c *net.TCPConn, rep byte, err error) error {
	writeReply(c, rep, nil)
	return closeAfterReply(c, err)
}

// isReadError reports whether the request could not even be read (the
// client went away or stalled), so there is nobody to reply to.
func isReadError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// closeAfterReply sends FIN after a failure reply and waits briefly for the
// client to close, discarding what it still sends: closing with unread data
// would reset the connection, and a reset can destroy the reply before the
// client reads it.
func closeAfterReply(c *net.TCPConn, err error) error {
	c.CloseWrite()
	c.SetReadDeadline(time.Now().Add(time.Second))
	io.CopyN(io.Discard, c, 64<<10)
	return err
}

// The configuration checks user password hashes with this package's parser.
func init() {
	config.CheckPasswordHash = func(hash string) error {
		_, err := passwd.Parse(hash)
		return err
	}
}
