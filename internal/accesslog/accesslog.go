// Package accesslog writes the access log: one line per answered HTTP request and per closed pair, as key=value text, JSON with a fixed field set, or the combined format of nginx and Apache, to a file that SIGUSR1 reopens for log rotation.
//
// docs/access-log.md lists each format's fields.
package accesslog

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Entry is one line of the access log: an answered HTTP request (Type
// "request") or a closed pair (Type "pair"). Fields that do not apply to
// a line's type are left zero.
type Entry struct {
	Type     string // "request" or "pair"
	Time     time.Time
	Listener string
	Kind     string // the listener's proxy kind
	// Client is the client's address and port.
	Client string
	// Method, Host, Target (path and query as the client sent them) and
	// Protocol ("HTTP/1.1") are a request's.
	Method, Host, Target, Protocol string
	Status                         int
	// BytesUp went from the client's side to the upstream, BytesDown to
	// the client: for a request, its head (as the proxy rewrote it) and
	// body each way.
	BytesUp, BytesDown int64
	// Duration is a request's from its head's arrival to its answer's
	// end, or a pair's whole life; UpstreamDuration is a request's wait
	// for its back end's response head (0 for none).
	Duration, UpstreamDuration    time.Duration
	UserAgent, Referer, RequestID string
	Upstream, Engine              string
	// Reason is why a pair closed, Note why it was not spliced, Err
	// what went wrong (pairs only).
	Reason, Note, Err string
}

// Formats writing Entries.
const (
	// Text is key=value lines (log/slog's text handler).
	Text = "text"
	// JSON is one object per line with every field of Entry, always.
	JSON = "json"
	// Combined is the NCSA combined format: request lines of the HTTP
	// kinds, and pair lines of the others only (see combinedLine).
	Combined = "combined"
)

// Logger writes entries in one format to a writer; safe for concurrent
// use, each entry one write.
type Logger struct {
	format string
	out    *output
	slog   *slog.Logger // the text format's
	// buf holds the line being built; mu guards it and the write.
	mu  sync.Mutex
	buf []byte
}

// New returns a logger writing format (Text, JSON or Combined) to w.
func New(w io.Writer, format string) (*Logger, error) {
	return newLogger(&output{w: w}, format)
}

// Open returns a logger writing format to the file at path, appended to
// and created (mode 0640) if missing, or to stdout for "-". Reopen opens
// the path anew.
func Open(path, format string) (*Logger, error) {
	out := &output{path: path}
	if path == "-" {
		out.w = os.Stdout
	} else if err := out.reopen(); err != nil {
		return nil, err
	}
	return newLogger(out, format)
}

func newLogger(out *output, format string) (*Logger, error) {
	l := &Logger{format: format, out: out}
	switch format {
	case Text, "":
		l.format = Text
		l.slog = slog.New(slog.NewTextHandler(out, nil))
	case JSON, Combined:
	default:
		return nil, fmt.Errorf("unknown access log format %q", format)
	}
	return l, nil
}

// Path is the file the logger writes to ("-" for stdout), "" for a writer.
func (l *Logger) Path() string { return l.out.path }

// Format is the logger's format.
func (l *Logger) Format() string { return l.format }

// Slog is the text format's slog logger, nil for the others: text lines
// are slog records (msg "request" or "pair").
func (l *Logger) Slog() *slog.Logger {
	if l == nil {
		return nil
	}
	return l.slog
}

// Log writes e, or nothing where the format has no line for it (see
// Combined). The text format writes through Slog, not here.
func (l *Logger) Log(e *Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.format {
	case JSON:
		l.buf = appendJSON(l.buf[:0], e)
	case Combined:
		var ok bool
		if l.buf, ok = appendCombined(l.buf[:0], e); !ok {
			return
		}
	default:
		return
	}
	l.out.Write(l.buf)
}

// Reopen opens the log's file anew, at its path: after a rotation moved
// it away, lines go to a new file there. Lines being written meanwhile
// finish in the old one. A logger on stdout or a writer has nothing to
// reopen.
func (l *Logger) Reopen() error { return l.out.reopen() }

// Close closes the log's file, if it opened one.
func (l *Logger) Close() error { return l.out.close() }

// output is where lines go: w, and the file it is when opened from path.
type output struct {
	path string
	mu   sync.Mutex // guards w and f
	w    io.Writer
	f    *os.File
}

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w.Write(b)
}

// reopen opens path and swaps it in; the old file closes once the swap is
// done, so no line is lost or split between the two.
func (o *output) reopen() error {
	if o.path == "" || o.path == "-" {
		return nil
	}
	f, err := os.OpenFile(o.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	o.mu.Lock()
	old := o.f
	o.w, o.f = f, f
	o.mu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

func (o *output) close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil {
		return nil
	}
	err := o.f.Close()
	o.w, o.f = io.Discard, nil
	return err
}
