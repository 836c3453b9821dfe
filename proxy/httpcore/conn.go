// Conn: one client connection, its current upstream, and relaying one request and its response.

package httpcore

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/proxy"
)

// readerSize is the buffer of the head readers: a request head usually fits,
// and whatever body it reads ahead is written out before splicing.
const readerSize = 16 << 10

// Conn is one client connection of an HTTP proxy and the upstream its last
// request went to.
type Conn struct {
	// S is the pair's session.
	S proxy.Session
	// Limits bound request heads.
	Limits Limits
	// Idle bounds waiting for the next request and splices in which
	// nothing moves, and waiting for the upstream where it is shorter than
	// Limits.ResponseTimeout (upIdle); 0 never times out.
	Idle time.Duration
	// served is set once a request head was read: RequestTimeout bounds
	// only the first.
	served bool
	// ProxyProtocol ("v1", "v2" or "") is sent on each new upstream
	// connection, with the client's address.
	ProxyProtocol string
	// CopyBelow is the largest rest of a response body with a length
	// (what did not come with the head: a splice's byte limit) the proxy
	// copies itself, in control mode, instead of splicing it; 0:
	// DefaultCopyBelow.
	CopyBelow int64
	// upgrade is the protocol the current request asks to switch to
	// (WebSocket, say), "" for none or one the proxy refuses (h2c).
	upgrade string
	// cur is the request being served, since curStart: what
	// RecordRequest reports. curDown is the client's byte count when the
	// last answer was recorded (record), so that an answer is what the
	// count grew by until it is, a refused head's too; curKernel and
	// curSpliced are what of it kernelCopy and an engine moved
	// (proxy.Request's Kernel and Spliced).
	cur                   *http.Request
	curStart              time.Time
	curDown, curUp        int64
	curKernel, curSpliced int64
	// curUpstream is the current request's wait for response heads
	// (RoundTrip), proxy.Request's Upstream.
	curUpstream time.Duration
	// reqID holds the X-Request-ID the proxy made for the current
	// request (SetRequestID), reqIDValue its header field's value.
	reqID      [2 * requestIDBytes]byte
	reqIDValue [1]string

	// Pool, if not nil, shares upstream connections with the listener's
	// other client connections: the current one goes back to it when the
	// next request goes elsewhere or the client connection ends, and Use
	// takes one from it before dialling.
	Pool *UpstreamPool
	// UpstreamTLS, if not nil, gives the TLS configuration of the
	// upstream named key (Use's), nil for one reached over plain TCP. A
	// TLS upstream's connections are kept by their client connection
	// only, never pooled, and its bodies are copied in user space.
	UpstreamTLS func(key string) *tls.Config
	// Class is added to Use's key in the pool: connections made for a
	// client connection of another class are not interchangeable (see
	// proxy.DialClass).
	Class string
	// mem, if not nil, is where each request and response is built, in
	// the memory of the last ones (see Reuse).
	mem *exchangeMem
	// pooled is the memory c took from connMems, given back by release.
	pooled *connMem
	// requests counts the request heads read.
	requests int
	// stopped is set when the pair is interrupted: its upstream may carry
	// a deadline in the past and goes to no pool.
	stopped atomic.Bool
	// stop ends the wait for a next request when a graceful shutdown begins.
	stop stopWatch
	// pace bounds the current request body's whole time (bodyPaced).
	pace bodyPace
	// clientDeadline: ReadRequest left a read deadline on the client.
	clientDeadline bool
	// firstCtx and firstBy are ReadRequest's context and the first
	// request's deadline while it waits for that request (waitFirst).
	firstCtx context.Context
	firstBy  time.Time
	// sendingBody: a request body goes upstream (upIdle).
	sendingBody bool
	// upFailed: the upstream, not the client, failed the last
	// RoundTrip (UpstreamFailed).
	upFailed bool
	// head is where the heads the proxy writes are built, one at a time,
	// each written before the next is built.
	head []byte
	// clientIP is ClientIP's answer, once asked.
	clientIP string
	// limited is kernelCopy's reader, kept so that it allocates nothing.
	limited io.LimitedReader
	// clientPacing caches paced's answer for the client connection, and
	// upPacing for upPaced, the upstream it was last asked of.
	clientPacing, upPacing pacing
	upPaced                *net.TCPConn
	// clientW and upW write to the client and the current upstream.
	clientW, upW rawWriter

	// clientConn is what the proxy reads the client from and writes it
	// to: the pair's socket itself, or a TLS connection over it
	// (NewConnOn); clientTLS tells the second, whose bytes never leave
	// the process unencrypted, so never go to an engine or splice(2).
	clientConn net.Conn
	clientTLS  bool

	client   *bufio.Reader
	clientIn idleReader // what client reads from
	clientDL idleDeadline
	up       *upstream
	// upMem is where attach builds the current upstream, which up points
	// to: one at a time, none kept past Close.
	upMem upstream
	// upIn and upR read every upstream of the connection in turn: one
	// buffer, reset for each new upstream (its last one left none unread).
	upIn idleReader
	upR  *bufio.Reader
}

// Splice hands the pair to the listener's engine (Session.Splice) after
// lifting the control-mode deadlines, which the engine's reads must not see.
func (c *Conn) Splice(ctx context.Context, opts engine.Options) (engine.Result, error) {
	c.clientDL.lift()
	if c.up != nil {
		c.up.dl.lift()
	}
	return c.S.Splice(ctx, opts)
}

// Reuse has the requests ReadRequest returns and the responses RoundTrip
// returns built in the memory of the connection's last ones: for a proxy
// that keeps neither, nor their header maps, nor any string of theirs
// once Relay returned. Their strings share the memory of the head they
// were read from, which the next head overwrites: a proxy that keeps one
// clones it (strings.Clone). Formatting one into a log line or an error
// while the exchange lives is no keeping.
func (c *Conn) Reuse() {
	switch {
	case c.mem != nil:
	case c.pooled != nil:
		c.mem = &c.pooled.ex
	default:
		c.mem = new(exchangeMem)
	}
}

// NewConn starts serving the client of s.
func NewConn(s proxy.Session, lim Limits, idle time.Duration) *Conn {
	return NewConnOn(s, s.Pair().Client, lim, idle)
}

// NewConnOn starts serving the client of s through client: the pair's
// socket, or a connection over it that the proxy decrypts (a *tls.Conn).
// Through any other than the socket itself, every body is copied in user
// space: no engine splices the pair and no splice(2) moves a body, since
// the socket's bytes are not the body's (TLS records).
func NewConnOn(s proxy.Session, client net.Conn, lim Limits, idle time.Duration) *Conn {
	c := &Conn{S: s, Limits: lim, Idle: idle, clientConn: client}
	c.clientDL.conn = s.Pair().Client
	c.clientIn = idleReader{dl: &c.clientDL, conn: client, idle: c.clientIdle(), stopped: &c.stopped, early: true}
	if tc, ok := client.(*net.TCPConn); ok && tc == s.Pair().Client {
		if rc, err := tc.SyscallConn(); err == nil {
			c.clientIn.rc = rc
		}
	} else {
		c.clientTLS = true
		s.NoSplice("client side is TLS: decrypted and copied in user space")
	}
	c.clientW.full = c.clientFull
	c.clientIn.full = c.clientW.full
	c.clientW.use(client, c.clientIn.rc)
	c.stop.done = make(chan struct{})
	c.takeMem()
	return c
}

// interrupt makes every blocked read or write of the pair in control mode
// fail at once (shutdown); a splice in progress ends by the same context.
func (c *Conn) interrupt() {
	c.stopped.Store(true)
	p := c.S.Pair()
	p.Client.SetDeadline(past)
	if up := p.Upstream(); up != nil {
		up.SetDeadline(past)
	}
}

func (c *Conn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	c.up.idle = false
	c.upFailed = false
	c.up.closing = c.closesUpstream(req)
	c.head = appendRequestHead(c.head[:0], req, c.upgrade, c.up.closing)
	c.up.dl.refresh(c.upIdle(), &c.stopped)
	if requestBody(req) == bodyNone && c.up.r.Buffered() == 0 && c.up.in.rc != nil {
		// The head goes with the first read of the response: one wait,
		// no read that could only find nothing.
		c.up.in.send = c.head
	} else {
		if err := c.writeUp(c.head); err != nil {
			c.upFailed = true
			return nil, err
		}
		if err := c.relayRequestBody(ctx, req); err != nil {
			return nil, err
		}
		c.up.dl.refresh(c.upIdle(), &c.stopped)
	}
	if ctx.Err() != nil {
		c.up.in.send = nil
		return nil, ctx.Err() // interrupt may have run before the deadline above
	}
	resp, err := c.readResponse(ctx, req)
	c.up.in.send = nil // sent, unless the read failed first
	return resp, c.upstreamTimedOut(err)
}

// closesUpstream reports whether req asks the server to close the
// connection after its response: when the client asked to close its own
// and the upstream connection could go nowhere after it. With a Pool it
// asks for keep-alive instead, and the connection goes to the pool once
// the response was read whole, as HAProxy's http-reuse does: a client
// that opens a connection per request then costs the proxy no upstream
// connect and close per request, nor the server its accept.
func (c *Conn) closesUpstream(req *http.Request) bool {
	return req.Close && (c.Pool == nil || c.up.tls != nil)
}

// UpstreamFailed reports whether the last RoundTrip failed by its
// upstream: the connection broke under the request head or before a
// response head came, nothing of the head came within the response
// timeout, or what came was no valid response head. A failure of the
// client's (a body it got wrong or stopped sending, a connection it
// closed) is not the upstream's.
func (c *Conn) UpstreamFailed() bool { return c.upFailed }

// Relay sends the response to the client: the head, then the body, spliced
// when its length is known. When capture is not nil and the body's length is
// at most capture's limit, the body is copied in control mode instead and
// returned, for a cache. Relay reports whether the client connection can
// carry another request.
func (c *Conn) Relay(ctx context.Context, req *http.Request, resp *http.Response, capture int64) (keep bool, body []byte, err error) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		c.record(resp.StatusCode)
		return false, nil, c.relaySwitch(ctx, resp)
	}
	defer func() {
		c.record(resp.StatusCode)
		err = c.timedOut(err) // a body the upstream stopped sending, or the client taking
	}()
	kind := responseBody(req, resp)
	c.up.unframed = req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	keep = !req.Close && kind != bodyUntilClose
	upKeep := !c.up.closing && kind != bodyUntilClose && !resp.Close
	head := appendResponseHead(c.head[:0], req, resp, kind, keep)
	c.head = head
	if kind == bodyLength && capture <= 0 && c.up.in.rc != nil &&
		int64(c.up.r.Buffered()) < resp.ContentLength && resp.ContentLength <= int64(c.up.r.Size()) {
		// What more of a body that fits in the reader's buffer has
		// arrived already is read into it (the origin wrote a 10 KiB
		// object in two writes, say): if that completes the body, the
		// response leaves whole, in one sendmsg, instead of a writev,
		// reads and writes. It does not wait: a body that trickles in
		// is relayed as it comes (copyResponse), and any error is met
		// again there.
		c.up.in.noWait = true
		c.up.r.Peek(int(resp.ContentLength))
		c.up.in.noWait = false
	}
	if kind == bodyLength && capture <= 0 && int64(c.up.r.Buffered()) >= resp.ContentLength {
		// The whole body came with the head (small objects): head and
		// body leave in one writev, not two writes and a splice setup.
		body, _ := c.up.r.Peek(int(resp.ContentLength))
		var err error
		if keep && c.clientIn.rc != nil {
			c.deferResponse(head, body)
		} else {
			err = c.writeClientv(head, body)
		}
		c.up.r.Discard(len(body))
		c.responseRead(upKeep) // the client's failure leaves the upstream as good as ever
		return keep && err == nil, nil, err
	}
	if kind == bodyLength && capture <= 0 && c.copiesRest(resp.ContentLength, c.up.r) {
		if err := c.copyResponse(head, resp.ContentLength); err != nil {
			return false, nil, err
		}
		c.responseRead(upKeep)
		return keep, nil, nil
	}
	if err := c.writeClient(head); err != nil {
		return false, nil, err
	}
	switch kind {
	case bodyLength:
		if capture > 0 && resp.ContentLength <= capture {
			body, err = c.captureBody(resp.ContentLength)
		} else {
			err = c.spliceBody(ctx, engine.Down, c.up.r, resp.ContentLength)
		}
	case bodyChunked:
		c.S.NoSplice("chunked response body streamed in control mode")
		done := c.streaming()
		err = relayChunked(c.clientWriter(), c.up.r, 0)
		done()
	case bodyUntilClose:
		err = c.spliceToEOF(ctx)
	}
	if err != nil {
		return false, nil, err
	}
	c.responseRead(upKeep)
	return keep, body, nil
}

// deferResponse has a response that came whole with its head written by
// the read that waits for the client's next request (sendThenRead), head
// and body in one sendmsg. The body is not copied: it stays in
// the upstream reader's buffer, which nothing refills before that read
// (the next request must be read before anything goes upstream), nor
// resets (a new upstream is attached only for a request). Its bytes are
// counted now, for the request's record. flush writes it first if anything
// else comes before that read.
func (c *Conn) deferResponse(head, body []byte) {
	c.clientIn.send, c.clientIn.send2 = head, body
	c.S.Pair().AddBytes(engine.Down, int64(len(head)+len(body)))
}

// flush writes a deferred response, if one is pending.
func (c *Conn) flush() error {
	if c.clientIn.send == nil && c.clientIn.send2 == nil {
		return nil
	}
	c.clientDL.refresh(c.clientIdle(), &c.stopped)
	b1, b2 := c.clientIn.send, c.clientIn.send2
	c.clientIn.send, c.clientIn.send2 = nil, nil
	_, err := c.clientW.writev(b1, b2)
	return err
}

// record reports the current request, answered with status, to the
// session if it records requests; once per request.
func (c *Conn) record(status int) {
	req := c.cur
	if req == nil {
		if status < 400 {
			return
		}
		// A head refused before it parsed: counted all the same.
		req = &http.Request{URL: &url.URL{}}
	}
	c.cur = nil
	rr, recorded := c.S.(proxy.RequestRecorder)
	rl, logged := c.S.(proxy.RequestLogger)
	if !recorded && !logged {
		return
	}
	down, up, end := c.S.Pair().Bytes(engine.Down), c.S.Pair().Bytes(engine.Up), time.Now()
	r := requestOf(req)
	r.Status, r.Bytes, r.BytesUp = status, max(down-c.curDown, 0), max(up-c.curUp, 0)
	r.Kernel, r.Spliced, r.Duration, r.Upstream = c.curKernel, c.curSpliced, end.Sub(c.curStart), c.curUpstream
	if recorded {
		rr.RecordRequest(r)
	}
	if logged {
		rl.LogRequest(r)
	}
	// The next answer counts from here. A head refused before it parsed
	// starts no request, so its time counts from here too.
	c.curStart, c.curDown, c.curUp, c.curKernel, c.curSpliced, c.curUpstream = end, down, up, 0, 0, 0
}

// requestOf is what req says of itself in a proxy.Request.
func requestOf(req *http.Request) proxy.Request {
	host := req.Host
	if host == "" && req.URL != nil {
		host = req.URL.Host
	}
	r := proxy.Request{Method: req.Method, Host: host, Target: req.RequestURI, Proto: req.Proto}
	if req.URL != nil {
		r.Path = req.URL.Path
	}
	if id := req.Header[requestIDField]; len(id) > 0 && ValidRequestID(id[0]) {
		r.RequestID = id[0]
	}
	r.UserAgent, r.Referer = headerValue(req.Header, "User-Agent"), headerValue(req.Header, "Referer")
	return r
}

// headerValue is h's first value of the canonical name, as h.Get without
// canonicalizing.
func headerValue(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Record reports the current request as answered with status, for
// answers the proxy writes itself (a cache hit, a CONNECT tunnel).
func (c *Conn) Record(status int) { c.record(status) }

// WriteResponse writes a complete response (head and body) to the client,
// for answers the proxy has without an upstream (a cache hit, CONNECT).
func (c *Conn) WriteResponse(b []byte) error { return c.writeClient(b) }

// ClientBuffered returns and consumes what the client sent past the last
// request head that the proxy has read but not relayed.
func (c *Conn) ClientBuffered() []byte {
	n := c.client.Buffered()
	b, _ := c.client.Peek(n)
	out := append([]byte(nil), b...)
	c.client.Discard(n)
	return out
}

// WriteUp sends b to the current upstream in control mode.
func (c *Conn) WriteUp(b []byte) error { return c.writeUp(b) }

// ClientIP is the client's address without the port: the socket's peer,
// or the client a trusted balancer's PROXY header named (Pair.ClientAddr).
func (c *Conn) ClientIP() string {
	if c.clientIP == "" {
		c.clientIP = clientIP(c.S.Pair().ClientAddr())
	}
	return c.clientIP
}

func clientIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().String()
	}
	addr := a.String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// HostPort returns host with port def added when it has none.
func HostPort(host string, def int) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(def))
}
