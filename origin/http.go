// The http protocol: deterministic objects of any size, a health check, and the size syntax they share with clients.

package origin

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxObjectSize bounds /obj/<size>; larger sizes are refused.
const MaxObjectSize = 1 << 40

// objectChunk is how much of an object is generated per write.
const objectChunk = 64 << 10

// sizeUnits are the suffixes ParseSize accepts, lower-cased: SI units are
// powers of 1000 and IEC units powers of 1024, as their names say.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}

// ParseSize parses a byte count: plain digits or digits followed by B, KB,
// MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), in any case.
// It refuses sizes above MaxObjectSize.
func ParseSize(s string) (int64, error) {
	digits := s[:len(s)-len(strings.TrimLeft(s, "0123456789"))]
	unit, ok := sizeUnits[strings.ToLower(s[len(digits):])]
	if !ok || digits == "" {
		return 0, fmt.Errorf("origin: bad size %q: want digits with an optional B, KB, MB, GB, KiB, MiB or GiB", s)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > MaxObjectSize/unit {
		return 0, fmt.Errorf("origin: size %q out of range (max %d bytes)", s, int64(MaxObjectSize))
	}
	return n * unit, nil
}

// ObjectPath is the URL path of the object of size bytes.
func ObjectPath(size int64) string { return "/obj/" + strconv.FormatInt(size, 10) }

// ObjectSHA256 is the sha256 of the body GET /obj/<size> returns. It
// generates the whole object, so it costs about as much as downloading it
// from loopback.
func ObjectSHA256(size int64) [32]byte {
	h := sha256.New()
	WriteObject(h, size) // a hash takes every write
	return [32]byte(h.Sum(nil))
}

// newHTTPServer builds the net/http server of one http listener.
func (s *Server) newHTTPServer(cfg serveConfig, c *counters) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /obj/{size}", serveObject)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("ok\n"))
	})
	h := func(w http.ResponseWriter, r *http.Request) {
		c.requests.Add(1)
		if cfg.name != "" {
			w.Header().Set("X-Origin-Name", cfg.name)
		}
		mux.ServeHTTP(w, r)
	}
	return &http.Server{
		Handler:           http.HandlerFunc(h),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// serveHTTP runs hs on l until Close.
func (s *Server) serveHTTP(hs *http.Server, l net.Listener) {
	err := hs.Serve(l)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Warn("origin http ended", "addr", l.Addr(), "err", err)
	}
}

// serveObject writes exactly size bytes of the object's pattern with a
// Content-Length, so keep-alive clients can reuse the connection.
func serveObject(w http.ResponseWriter, r *http.Request) {
	size, err := ParseSize(r.PathValue("size"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	if r.Method == http.MethodHead {
		return
	}
	WriteObject(w, size) // an error: the client went away
}

// WriteObject writes the object of size bytes, the body GET /obj/<size>
// returns, to w: for a server that serves the same objects from files.
func WriteObject(w io.Writer, size int64) error {
	p := patternFor(seedObject, size)
	buf := make([]byte, min(size, objectChunk))
	for off := int64(0); off < size; {
		chunk := buf[:min(int64(len(buf)), size-off)]
		p.fill(chunk, off)
		if _, err := w.Write(chunk); err != nil {
			return err
		}
		off += int64(len(chunk))
	}
	return nil
}

// countingListener counts the connections and bytes of an http listener,
// which net/http accepts and serves on its own. It also registers each
// connection with the Server: http.Server.Close misses a connection accepted
// but not yet tracked, and the Server's own Close must not.
type countingListener struct {
	net.Listener
	s *Server
	c *counters
}

func (l *countingListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cc := &countingConn{Conn: conn, s: l.s, c: l.c}
		if l.s.track(cc, l.c) {
			return cc, nil
		}
		conn.Close()
	}
}

type countingConn struct {
	net.Conn
	s    *Server
	c    *counters
	once sync.Once
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.c.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.c.out.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.s.forget(c, c.c) })
	return err
}
