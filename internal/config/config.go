// Package config loads splicer's YAML configuration strictly: unknown keys,
// wrong types, bad values and duplicates are all errors, each reported with
// its file, line, column and key path, and all of them at once.
//
// A minimal configuration:
//
//	listeners:
//	  - name: plug
//	    listen: 10.99.1.1:7000
//	    upstream: [10.99.2.2:5201]
//
// Everything else has a default (see Default and DefaultListener). In YAML
// an IPv6 address must be quoted ('[::1]:80'), since a bare [ starts a list.
// Anchors, aliases and merge keys (<<: *base) work, so listeners can share
// settings.
//
// The schema is the Go structs below: a key is a field with a yaml tag, so
// adding a key (for example a listener's `socks5:` section, once that proxy
// exists) is adding a field, its default in DefaultListener or Default and,
// if needed, a rule in validate.go.
//
// max_connections: past the limit a listener still accepts each new
// connection and closes it at once, rather than leaving it in the kernel's
// accept queue, so clients see a prompt close instead of a hanging connect.
//
// yaml.v3 reports some syntax errors at the start of the enclosing block or
// list rather than at the offending line; the line given is the one yaml.v3
// knows.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is a whole splicer configuration file.
type Config struct {
	// Source is the file Parse read, as it was, and SourceName its name:
	// what a master hands its next binary, which parses it anew (a
	// Config written back out is no file a user wrote: every default
	// spelled out, some as the 0 a user may not write).
	Source     []byte `yaml:"-"`
	SourceName string `yaml:"-"`
	// Admin is the address of the admin HTTP server (GET /metrics, GET
	// /flows); empty disables it.
	Admin string `yaml:"admin"`
	Log   Log    `yaml:"log"`
	// AdminToken, if set, is required as a bearer token on the admin
	// endpoint (probes /healthz and /ready excepted). An admin address
	// beyond loopback needs one.
	AdminToken string `yaml:"admin_token,omitempty"`
	// AdminTokenFile names a file (relative to the configuration file's
	// directory) whose content, less surrounding white space, is the
	// AdminToken: a Kubernetes Secret or a systemd credential. Load reads
	// it; the process running as `user` must be able to.
	AdminTokenFile string `yaml:"admin_token_file,omitempty"`
	// User, when splicer starts as root, is who it runs as once its
	// listening sockets are bound: a user name or uid (its primary group
	// too), keeping only the capabilities its engines need.
	User string `yaml:"user"`
	// AccessLog writes one line per closed pair, and one per answered
	// HTTP request; off without a path. With it, the process log writes
	// a pair's closing line at debug: the access log is the record.
	AccessLog AccessLog `yaml:"access_log"`
	// ShutdownTimeout is how long a graceful shutdown waits, after it stops
	// accepting, for pairs to finish before closing them; and how long a
	// reload lets the pairs of a listener it removes finish (a changed
	// listener's pairs run on until they end or the process shuts down).
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// Threads is how many threads run splicer's own work at once (Go's
	// GOMAXPROCS; HAProxy's nbthread, Envoy's --concurrency): 0, the
	// default, one per CPU the process may use. Spliced bytes move in the
	// kernel and do not count against it; what it bounds is control mode
	// (reading and rewriting HTTP heads, copied bodies). A reload applies
	// a change at once.
	Threads int `yaml:"threads"`
	// Workers is how many processes serve the listeners (nginx's
	// worker_processes): left out, one. With more, `splicer run` is a
	// master that binds every listener once per worker (SO_REUSEPORT:
	// the kernel spreads new connections over them), starts the
	// workers, restarts one that dies, passes on signals and serves the
	// admin endpoint for all of them. Each worker runs Go on `threads`
	// threads, by default its share of the CPUs; limits that count
	// (max_connections, a server's max_conns, max_fails) hold per
	// worker. "auto": one per CPU the process may use.
	Workers Workers `yaml:"workers,omitempty"`
	// Memory trades the process's memory for the collector's CPU.
	Memory    Memory     `yaml:"memory"`
	Engines   Engines    `yaml:"engines"`
	Listeners []Listener `yaml:"listeners"`
}

// Memory tunes Go's collector. A pair an engine follows on its own
// (detached: ip's spliced pairs) keeps about a kilobyte of heap for its
// life and allocates nothing while idle, so with many of them the heap is
// mostly such pairs, and the collector's default headroom (GOGC=100: the
// heap may grow to twice what is live before a collection) is their cost
// again in RSS.
type Memory struct {
	// Limit is a soft limit on the process's memory (Go's GOMEMLIMIT):
	// near it the collector runs as often as it must to stay under.
	// 0: the GOMEMLIMIT environment variable, or none.
	Limit Size `yaml:"limit"`
	// DetachedGCPercent is the collector's headroom (GOGC) while at
	// least DetachedPairs pairs are detached; 0 keeps the process's
	// (GOGC, or 100) at any count. It is only ever lowered: a GOGC below
	// it, or off, stays.
	DetachedGCPercent int `yaml:"detached_gc_percent"`
	DetachedPairs     int `yaml:"detached_pairs"`
}

// DefaultDetachedGCPercent and DefaultDetachedPairs are memory's
// defaults: past 10,000 detached pairs the heap may exceed what is live
// by a tenth instead of doubling, which keeps an idle spliced pair under
// 2 KB of RSS (bench idle, docs/benchmarks.md). Idle pairs allocate
// nothing, so the extra collections fall only on what new connections
// allocate beside them.
const (
	DefaultDetachedGCPercent = 10
	DefaultDetachedPairs     = 10000
)

// Log configures the process log.
type Log struct {
	Level  string `yaml:"level"`  // one of LogLevels
	Format string `yaml:"format"` // one of LogFormats
}

// AccessLog configures the access log: one line per pair when it closes
// (client, upstream, listener, engine, bytes each way, duration, why it
// closed and, when it was not spliced, why not), and for the HTTP kinds
// one per answered request (method, target, protocol, status, bytes each
// way, durations, user agent, referer, request ID). docs/access-log.md
// describes each format's fields.
type AccessLog struct {
	// Path is a file (appended to, reopened on SIGUSR1 for log
	// rotation), "-" for stdout, or empty for none.
	Path string `yaml:"path"`
	// Format is one of AccessLogFormats: text (the default: key=value
	// lines), json (one object per line with a fixed set of fields) or
	// combined (the NCSA combined format of nginx and Apache, for log
	// analysers; request lines only for the HTTP kinds).
	Format string `yaml:"format"`
}

// Engines holds per-engine switches and tuning, shared by all listeners.
type Engines struct {
	Copy    CopyEngine    `yaml:"copy"`
	Pipe    PipeEngine    `yaml:"pipe"`
	Sockmap SockmapEngine `yaml:"sockmap"`
	IP      IPEngine      `yaml:"ip"`
}

// CopyEngine tunes the read/write engine.
type CopyEngine struct {
	BufferSize Size `yaml:"buffer_size"` // user-space buffer per direction
}

// PipeEngine tunes the splice(2) engine.
type PipeEngine struct {
	PipeSize Size `yaml:"pipe_size"` // pipe capacity set with F_SETPIPE_SZ
}

// SockmapEngine switches the sockmap engine; it exists so that users can
// turn sockmap off on kernels where it misbehaves.
type SockmapEngine struct {
	Enabled bool `yaml:"enabled"`
}

// IPEngine switches and tunes the tc engine that rewrites TCP/IP headers.
type IPEngine struct {
	Enabled bool `yaml:"enabled"`
	// TimeWait is how long a closed flow's entries stay, so late segments
	// are still translated rather than reaching a socket that no longer
	// exists.
	TimeWait    Duration `yaml:"time_wait"`
	IdleTimeout Duration `yaml:"idle_timeout"` // a flow idle this long is removed
	MaxPairs    int      `yaml:"max_pairs"`    // capacity of the BPF flow maps
	// PinDir is the directory in a BPF file system where the datapath is
	// pinned, so that spliced pairs outlive the process and the next one
	// adopts them: an absolute path, "off", or empty for the default of
	// `splicer run`, DefaultPinDir(the configuration file).
	PinDir string `yaml:"pin_dir"`
	// LocalPorts is the range of local ports, "LOW-HIGH", that the
	// upstream connections of listeners whose engine may be ip are
	// dialled from, or "off". The engine takes it out of the kernel's
	// ephemeral ports in its network namespace
	// (net.ipv4.ip_local_reserved_ports) and hands the ports out itself,
	// so that a pair spliced until it closes keeps no socket: its port
	// stays busy toward its server while the datapath holds the pair.
	// Off, or where the range cannot be reserved, the engine keeps a
	// socket per such pair instead.
	LocalPorts string `yaml:"local_ports"`
	// MinBody is the shortest splice with a byte limit (an HTTP body
	// past what came with its head) the engine takes; a shorter one goes
	// to the next engine of the listener (pipe), except that
	// http-reverse copies itself every body below min_body or 512 KiB,
	// whichever is less (32 KiB at least). Splicing and unsplicing cost
	// the pair a few hundred microseconds, which a short body does not
	// win back (DefaultMinBody). 0: every length.
	MinBody Size `yaml:"min_body"`
}

// PinDirOff switches pinning off in engines.ip.pin_dir; LocalPortsOff
// switches the port range off in engines.ip.local_ports.
const (
	PinDirOff     = "off"
	LocalPortsOff = "off"
)

// DefaultLocalPorts is the default of engines.ip.local_ports: 20,000
// ports of Linux's default ephemeral range (32768-60999), which leaves
// the kernel 8,232 for every other connection of the namespace.
const DefaultLocalPorts = "40000-59999"

// DefaultMinBody is the default of engines.ip.min_body: where ip starts
// to serve an http-reverse body at least as fast as pipe under cubic,
// Linux's default congestion control. Through the bench's lab (wrk -t2
// -c16 against an http-reverse listener per engine, 2 vCPUs, Linux 6.18,
// 2026-11-27), requests per second and the proxy's own CPU per request,
// pipe against ip: 1 MiB 2,463 (145 µs) against 2,085-2,115 (322 µs),
// 2 MiB 1,380-1,409 against 1,265-1,287, 4 MiB 717-737 (397 µs) against
// 744-747 (507 µs), 8 MiB 384-397 against 414-427. Below it the cost of
// a splice and an unsplice (and the drain of what the server sent before
// the splice) is not won back. On a host whose default is bbr without an
// fq qdisc, where every user-space sender pays for BBR's pacing timer, ip
// leads from 1 MiB or less (1 MiB 1,570-1,599 against 1,307-1,329): such
// hosts do better with min_body 512KiB, the default until 2026-11-27. In
// bench web under cubic, auto served 1 MiB at 1,529 req/s and 447 µs of
// its own CPU with ip taking the body (04:06), and at 1,885 req/s and
// 218 µs after the change (04:27). The process's CPU per body agrees:
// `splicer bench crossover` (docs/benchmarks.md), whose http mode weighs
// ip's splice and unsplice of every body against pipe, found them equal
// at 4,051 KiB (3,899-6,794) and 4,859 KiB (4,137-6,414) in two runs of 3
// (http_crossover_pipe_kib; 2-vCPU VM under load, bbr, 2026-12-07). Rerun
// it when ip's splice or unsplice cost changes. The floor is on what is
// left past the head, so a body of exactly 4 MiB stays with pipe.
const DefaultMinBody Size = 4 << 20

// PortRange parses LocalPorts: ok is false when it is off.
func (e IPEngine) PortRange() (low, high uint16, ok bool, err error) {
	if e.LocalPorts == LocalPortsOff {
		return 0, 0, false, nil
	}
	lo, hi, found := strings.Cut(e.LocalPorts, "-")
	a, errA := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	b, errB := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	switch {
	case !found || errA != nil || errB != nil:
		return 0, 0, false, fmt.Errorf("must be a port range LOW-HIGH or %q, got %q", LocalPortsOff, e.LocalPorts)
	case a < 1024 || b < a:
		return 0, 0, false, fmt.Errorf("must be a range of unprivileged ports, 1024 <= LOW <= HIGH <= 65535, got %q", e.LocalPorts)
	}
	return uint16(a), uint16(b), true, nil
}

// DefaultPinDir is the pin directory `splicer run --config path` uses when
// engines.ip.pin_dir is empty: /sys/fs/bpf/splicer/ and the file's name
// without its extension (splicer.yaml: /sys/fs/bpf/splicer/splicer), so
// instances with different files keep apart.
func DefaultPinDir(path string) string {
	name := filepath.Base(path)
	name = strings.TrimSuffix(name, filepath.Ext(name))
	if name == "" || name == "." || name == "/" {
		name = "splicer"
	}
	return "/sys/fs/bpf/splicer/" + name
}

// Listener is one listening address and what to do with its connections.
type Listener struct {
	Name   string `yaml:"name"`   // required, unique
	Listen string `yaml:"listen"` // required, IP:port or [IPv6]:port; empty host means all addresses
	Proxy  string `yaml:"proxy"`  // one of ProxyKinds
	// Upstream is the list of servers to connect to (tcp, filter; tcp
	// needs at least one), each "host:port" or {address, weight, backup,
	// max_conns} as a pool's servers, taken as Balance says.
	Upstream []PoolServer `yaml:"upstream"`
	// Balance picks a server of Upstream for each client connection: one
	// of Balances, default round_robin (HAProxy's roundrobin, leastconn,
	// and source: consistent_hash hashes the client's address).
	Balance string `yaml:"balance,omitempty"`
	// MaxFails failures of one of Upstream within FailTimeout skip it
	// for FailTimeout, unless every one is skipped (nginx's max_fails and
	// fail_timeout): failed connects, and for filter requests it did not
	// answer; default 1 and 10s, max_fails 0 never skips. http-reverse's
	// pools have their own.
	MaxFails    *int     `yaml:"max_fails,omitempty"`
	FailTimeout Duration `yaml:"fail_timeout,omitempty"`
	// QueueTimeout: with every usable server of Upstream full
	// (max_conns), a client waits this long for one to free a place
	// before it is refused (HAProxy's timeout queue); left out, it is
	// refused at once (nginx's max_conns). http-reverse's pools have
	// their own.
	QueueTimeout Duration `yaml:"queue_timeout,omitempty"`
	// MaxQueue bounds the clients that wait at once in that queue: one
	// more is refused at once (HAProxy's maxqueue, nginx's queue size);
	// 0, no bound but max_connections.
	MaxQueue int `yaml:"max_queue,omitempty"`
	// HealthCheck checks each of Upstream every interval (tcp, filter):
	// a connect, and a GET of path where one is given; one that fails is
	// not used until it passes again.
	HealthCheck *HealthCheck `yaml:"health_check,omitempty"`
	// Resolver says how and how often the servers of Upstream marked
	// resolve (or given by srv) are looked up (tcp, filter);
	// http-reverse's pools have their own.
	Resolver *Resolver `yaml:"resolver,omitempty"`
	Engine   string    `yaml:"engine"` // one of EngineNames
	// Promote is when engine auto moves a pair from copy to ip (see
	// Promote).
	Promote Promote `yaml:"promote"`
	// ConnectTimeout bounds the connect to an upstream.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// IdleTimeout closes a pair idle this long; 0 means never.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxConnections caps concurrent pairs; 0 means unlimited. Past it, new
	// connections are accepted and closed at once.
	MaxConnections int `yaml:"max_connections"`
	// SpliceAfter keeps a pair in control mode this long before splicing,
	// to demonstrate and measure splicing mid-stream.
	SpliceAfter Duration `yaml:"splice_after"`
	// ProxyProtocol sends a PROXY protocol header (v1 or v2) to the
	// upstream before any client byte; empty sends none.
	ProxyProtocol string `yaml:"proxy_protocol,omitempty"`
	// AcceptProxyProtocol reads a PROXY protocol header (v1 or v2) from
	// connections of ProxyProtocolFrom's sources, which must send one,
	// and takes the client it names as the connection's client wherever
	// the client's address counts: allow_clients and deny_clients,
	// max_connections_per_client, Forwarded, logs, consistent hashing, a
	// header sent on with ProxyProtocol (HAProxy's accept-proxy, nginx's
	// proxy_protocol with set_real_ip_from). Another source's connection
	// is served with its own address, unless it starts with a header:
	// then it is refused (see proxyproto.Consume and forwarder).
	AcceptProxyProtocol bool `yaml:"accept_proxy_protocol,omitempty"`
	// ProxyProtocolFrom are the CIDRs (or IPs) of the balancers trusted
	// to send that header; required with AcceptProxyProtocol.
	ProxyProtocolFrom []string `yaml:"proxy_protocol_from,omitempty"`
	// AllowClients, if set, are the only client CIDRs accepted;
	// DenyClients are refused (deny wins). Refused connections are closed
	// at once and counted (reason client_denied).
	AllowClients []string `yaml:"allow_clients,omitempty"`
	DenyClients  []string `yaml:"deny_clients,omitempty"`
	// MaxConnectionsPerClient caps one client IP's concurrent pairs; 0
	// means no cap.
	MaxConnectionsPerClient int `yaml:"max_connections_per_client"`
	// TCPKeepalive probes the listener's idle connections, client and
	// upstream, for a peer that vanished (see TCPKeepalive).
	TCPKeepalive TCPKeepalive `yaml:"tcp_keepalive"`
	// Destinations restrict where clients of http-forward and socks5 may
	// connect. Loopback, link-local, cloud metadata, unspecified and
	// multicast addresses and the forwarder's own addresses are refused
	// unless an allow rule names them.
	Destinations *Destinations `yaml:"destinations,omitempty"`

	// Proxy-specific sections, each read only by its proxy kind.
	SOCKS5 *SOCKS5 `yaml:"socks5,omitempty"`
	HTTP   *HTTP   `yaml:"http,omitempty"`
	Filter *Filter `yaml:"filter,omitempty"`
	Routes []Route `yaml:"routes,omitempty"`
	Pools  []Pool  `yaml:"pools,omitempty"`
	// TLSRoutes, DefaultPool and RequestTimeout route a tcp listener's
	// connections by their TLS ClientHello (kind_tcp.go).
	TLSRoutes      []TLSRoute `yaml:"tls_routes,omitempty"`
	DefaultPool    string     `yaml:"default_pool,omitempty"`
	RequestTimeout Duration   `yaml:"request_timeout,omitempty"`
	// UpstreamPool keeps idle keep-alive upstream connections for any
	// client connection to reuse (http-reverse).
	UpstreamPool *UpstreamPool `yaml:"upstream_pool,omitempty"`
	// TLS terminates TLS on the listener (http-reverse).
	TLS *TLS `yaml:"tls,omitempty"`

	// Line is the line of the listener's list item, for messages about the
	// listener found after loading (e.g. a failed bind).
	Line int `yaml:"-"`
}

// Destinations are destination rules, each "HOST[:PORTS]": a CIDR, an IP,
// a name or "*.name", optionally with a port or range ("10.0.0.0/8:443",
// "*.example.com:8000-8100", "[2001:db8::/32]:443", ":25").
type Destinations struct {
	Allow []string `yaml:"allow"`
	Deny  []string `yaml:"deny"`
}

// ProxyKinds are the proxy kinds a listener may name. A package that
// implements a new kind appends it here (from an init function).
var ProxyKinds = []string{"tcp", "socks5", "filter"}

// plannedProxyKinds are kinds the schema reserves but nobody implements yet;
// naming one gets "not implemented yet" rather than "unknown".
var plannedProxyKinds []string

// EngineNames are the values of a listener's engine key: auto, which picks
// the best engine that works for each pair, and every engine the binary
// has. Config names no engine itself: the assembly point (engine/all)
// registers them with RegisterEngines, so the list cannot drift from the
// engines that exist.
var EngineNames = []string{"auto"}

// RegisterEngines adds engine names a listener may choose; a name already
// known is not added twice.
func RegisterEngines(names ...string) {
	for _, n := range names {
		if !slices.Contains(EngineNames, n) {
			EngineNames = append(EngineNames, n)
		}
	}
}

// LogLevels, LogFormats and AccessLogFormats are the values of
// log.level, log.format and access_log.format.
var (
	LogLevels        = []string{"debug", "info", "warn", "error"}
	LogFormats       = []string{"text", "json"}
	AccessLogFormats = []string{"text", "json", "combined"}
)

// Default returns the configuration an empty file would mean, were an empty
// file allowed: every default filled in and no listeners.
func Default() Config {
	return Config{
		Log:             Log{Level: "info", Format: "text"},
		AccessLog:       AccessLog{Format: "text"},
		ShutdownTimeout: Duration(30 * time.Second),
		Memory:          Memory{DetachedGCPercent: DefaultDetachedGCPercent, DetachedPairs: DefaultDetachedPairs},
		Engines: Engines{
			Copy:    CopyEngine{BufferSize: 64 << 10},
			Pipe:    PipeEngine{PipeSize: 1 << 20},
			Sockmap: SockmapEngine{Enabled: true},
			IP: IPEngine{
				Enabled:     true,
				TimeWait:    Duration(60 * time.Second),
				IdleTimeout: Duration(10 * time.Minute),
				MaxPairs:    65536,
				LocalPorts:  DefaultLocalPorts,
				MinBody:     DefaultMinBody,
			},
		},
	}
}

// DefaultListener returns a listener with every optional key at its default.
func DefaultListener() Listener {
	return Listener{
		Proxy:          "tcp",
		Engine:         "auto",
		ConnectTimeout: Duration(5 * time.Second),
		IdleTimeout:    Duration(time.Hour),
		MaxConnections: 10000,
		TCPKeepalive:   DefaultTCPKeepalive,
		Promote:        DefaultPromote,
	}
}

// setDefaults lets the decoder start each listener list item from the
// defaults, so that a key left out keeps its default and a key set to 0 is 0.
func (l *Listener) setDefaults() { *l = DefaultListener() }

// setLine records the line of the listener's list item.
func (l *Listener) setLine(line int) { l.Line = line }

// Load reads and parses the configuration file at path. A file that cannot be
// read gives the os error; a file with problems gives Errors.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return LoadBytes(path, data)
}

// LoadBytes is Load of data read from path before: Parse, and the files
// the configuration names read.
func LoadBytes(path string, data []byte) (*Config, error) {
	cfg, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	if err := cfg.readTokenFile(filepath.Dir(path)); err != nil {
		return nil, err
	}
	return cfg, nil
}

// readTokenFile sets AdminToken from AdminTokenFile, if named, resolved
// against dir.
func (c *Config) readTokenFile(dir string) error {
	if c.AdminTokenFile == "" {
		return nil
	}
	path := c.AdminTokenFile
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("admin_token_file: %w", err)
	}
	if c.AdminToken = strings.TrimSpace(string(b)); c.AdminToken == "" {
		return fmt.Errorf("admin_token_file: %s is empty", path)
	}
	return nil
}

// Parse parses and validates a configuration; name is the file name used in
// errors. On any problem it returns a nil Config and Errors listing all of
// them.
func Parse(name string, data []byte) (*Config, error) {
	errs := newErrorList(name)
	root, ok := parseDocument(errs, data)
	if !ok {
		return nil, errs.sorted()
	}
	cfg := Default()
	d := newDecoder(errs)
	if root != nil {
		d.decode(root, &cfg, "")
	}
	if dir, err := filepath.Abs(filepath.Dir(name)); err == nil {
		cfg.resolveTLSPaths(dir) // a daemon may change directory
		cfg.resolveSOCKS5Paths(dir)
	}
	validate(&cfg, errs, d.nodes)
	if len(errs.errs) > 0 {
		return nil, errs.sorted()
	}
	cfg.Source, cfg.SourceName = data, name
	return &cfg, nil
}

// Validate checks a Config built in code rather than parsed, with the same
// rules as Parse; the Errors it returns have no lines.
func (c *Config) Validate() error {
	errs := newErrorList("config")
	validate(c, errs, nil)
	if len(errs.errs) > 0 {
		return errs.sorted()
	}
	return nil
}

// parseDocument parses data into a single YAML document and returns its root
// node, or nil for an empty document (only comments or nothing at all).
func parseDocument(errs *errorList, data []byte) (*yaml.Node, bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, true
	} else if err != nil {
		errs.errs = append(errs.errs, syntaxError(errs.file, data, err))
		return nil, false
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		errs.atNode(&next, "", "a second YAML document starts here; splicer reads one document per file")
		return nil, false
	} else if !errors.Is(err, io.EOF) {
		errs.errs = append(errs.errs, syntaxError(errs.file, data, err))
		return nil, false
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, true
	}
	return doc.Content[0], true
}
