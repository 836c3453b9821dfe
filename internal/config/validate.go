// Validation rules that need more than a value's type: ranges, enums, addresses, required keys and uniqueness.

package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxBuffer bounds the per-pair buffers: a larger value is almost surely a
// unit mistake, and F_SETPIPE_SZ takes an int anyway.
const maxBuffer = 1 << 30

// MaxThreads bounds threads: more is almost surely a typo, and Go's
// scheduler gains nothing past the CPUs a host has.
const MaxThreads = 4096

// validator checks a decoded Config and reports problems at the position of
// the offending key, or of the nearest enclosing one that exists in the file.
type validator struct {
	cfg   *Config
	errs  *errorList
	nodes map[string]*yaml.Node // nil for a Config built in code
}

func validate(cfg *Config, errs *errorList, nodes map[string]*yaml.Node) {
	v := &validator{cfg: cfg, errs: errs, nodes: nodes}
	v.top()
	v.engines()
	v.listeners()
}

// errorf reports a problem with the key at path. A key missing from the file
// has no node, so the error goes to its parent: a listener's missing name is
// reported on the listener's list item.
func (v *validator) errorf(path, format string, args ...any) {
	line, col := v.position(path)
	v.errs.add(line, col, path, format, args...)
}

func (v *validator) position(path string) (line, col int) {
	if v.nodes == nil {
		return 0, 0
	}
	for p := path; ; p = parentPath(p) {
		if n := v.nodes[p]; n != nil {
			return n.Line, n.Column
		}
		if p == "" {
			return 1, 0 // empty file: no node at all
		}
	}
}

// parentPath strips the last ".key" or "[i]" from path.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func (v *validator) top() {
	v.admin()
	v.oneOf("log.level", v.cfg.Log.Level, LogLevels)
	v.oneOf("log.format", v.cfg.Log.Format, LogFormats)
	v.oneOf("access_log.format", v.cfg.AccessLog.Format, AccessLogFormats)
	v.notNegative("shutdown_timeout", v.cfg.ShutdownTimeout)
	if t := v.cfg.Threads; t < 0 || t > MaxThreads {
		v.errorf("threads", "must be 0 (one per CPU) or a count up to %d, got %d", MaxThreads, t)
	}
	v.workers()
	v.memory()
}

// memory checks the collector's settings (a size is never negative).
func (v *validator) memory() {
	m := v.cfg.Memory
	if p := m.DetachedGCPercent; p < 0 || p > 100 {
		v.errorf("memory.detached_gc_percent", "must be 0 (off) or a percent up to 100, got %d", p)
	}
	if m.DetachedPairs < 0 {
		v.errorf("memory.detached_pairs", "must not be negative, got %d", m.DetachedPairs)
	}
}

// admin checks the admin address, and refuses one reachable beyond this
// host without a token: anyone who reached it could drain servers,
// reload or upgrade.
func (v *validator) admin() {
	c := v.cfg
	if c.AdminToken != "" && c.AdminTokenFile != "" {
		v.errorf("admin_token_file", "set admin_token or admin_token_file, not both")
	}
	if c.Admin == "" {
		return
	}
	ip, _, err := parseAddr(c.Admin, adminAddr)
	if err != nil {
		v.errorf("admin", "%v", err)
		return
	}
	host, _, _ := net.SplitHostPort(c.Admin)
	loopback := ip.IsLoopback() || strings.EqualFold(host, "localhost")
	if !loopback && c.AdminToken == "" && c.AdminTokenFile == "" {
		v.errorf("admin", "%q is reachable beyond this host and no admin_token is set: anyone who reaches it could drain servers, reload or upgrade; set admin_token (or admin_token_file), or listen on 127.0.0.1", c.Admin)
	}
}

// workers checks the count, and refuses what the processes cannot honour
// together: a per-client limit (the kernel spreads one client's
// connections over the workers, each counting only its own).
func (v *validator) workers() {
	w := v.cfg.Workers
	if w != WorkersAuto {
		v.positiveOrLeftOut("workers", int64(w), strconv.Itoa(int(w)), "one process")
	}
	if w > MaxWorkers {
		v.errorf("workers", "must be auto or a count up to %d, got %d", MaxWorkers, w)
	}
	if !w.Master() {
		return
	}
	if low, high, ok, err := v.cfg.Engines.IP.PortRange(); ok && err == nil && int(high)-int(low)+1 < w.Count() {
		v.errorf("engines.ip.local_ports", "%q has fewer ports than workers (%d): each worker takes its own share", v.cfg.Engines.IP.LocalPorts, w.Count())
	}
}

func (v *validator) engines() {
	e := &v.cfg.Engines
	v.bufferSize("engines.copy.buffer_size", e.Copy.BufferSize)
	v.bufferSize("engines.pipe.pipe_size", e.Pipe.PipeSize)
	v.notNegative("engines.ip.time_wait", e.IP.TimeWait)
	v.notNegative("engines.ip.idle_timeout", e.IP.IdleTimeout)
	if e.IP.MaxPairs < 1 {
		v.errorf("engines.ip.max_pairs", "must be at least 1 (it sizes the BPF flow maps), got %d", e.IP.MaxPairs)
	}
	if d := e.IP.PinDir; d != "" && d != PinDirOff && !filepath.IsAbs(d) {
		v.errorf("engines.ip.pin_dir", "must be an absolute path (a directory in a BPF file system) or %q, got %q", PinDirOff, d)
	}
	if _, _, _, err := e.IP.PortRange(); err != nil {
		v.errorf("engines.ip.local_ports", "%v", err)
	}
}

func (v *validator) bufferSize(path string, s Size) {
	if s < 1 || s > maxBuffer {
		v.errorf(path, "must be between 1 byte and 1GiB, got %s", s)
	}
}

// listenerNameRE is HAProxy's rule for proxy names; names appear in logs,
// metrics labels and the admin API, where spaces and quotes are a nuisance.
var listenerNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

// seenAddr is an earlier listener's address, for conflict messages that say
// where the first one is.
type seenAddr struct {
	index int
	addr  netip.Addr
	port  uint16
	text  string
}

func (v *validator) listeners() {
	if len(v.cfg.Listeners) == 0 {
		v.errorf("listeners", "at least one listener is required")
		return
	}
	names := map[string]int{} // name -> index of the first listener using it
	var addrs []seenAddr
	for i := range v.cfg.Listeners {
		l := &v.cfg.Listeners[i]
		p := "listeners[" + strconv.Itoa(i) + "]"
		v.listenerName(p, i, l, names)
		v.listenAddr(p, i, l, &addrs)
		v.proxyKind(p, l)
		v.upstreams(p, l)
		v.failKeys(p, l.MaxFails, l.FailTimeout)
		if contains(builtinKeys["queue_timeout"], l.Proxy) { // else kindSections says it is not used
			v.queue(p, l.QueueTimeout, l.MaxQueue, l.Upstream)
		}
		v.healthCheck(p+".health_check", l.HealthCheck, false)
		v.resolver(p+".resolver", l.Resolver, l.Upstream)
		v.engine(p, l)
		v.promote(p, l)
		v.oneOf(p+".proxy_protocol", l.ProxyProtocol, ProxyProtocols)
		v.kindSections(p, l)
		if l.ConnectTimeout <= 0 {
			v.errorf(p+".connect_timeout", "must be greater than 0, got %s", l.ConnectTimeout)
		}
		v.notNegative(p+".idle_timeout", l.IdleTimeout)
		v.notNegative(p+".splice_after", l.SpliceAfter)
		v.tcpKeepalive(p, l.TCPKeepalive)
		if l.MaxConnections < 0 {
			v.errorf(p+".max_connections", "must be 0 (unlimited) or more, got %d", l.MaxConnections)
		}
	}
	v.adminClash(addrs)
}

// adminClash refuses an admin address that a listener's address takes:
// run binds the listeners first, and the admin endpoint then fails with
// "address already in use" (a reload that adds such a listener fails
// its bind). Workers change nothing: the admin socket is bound without
// SO_REUSEPORT, so it shares its port with no listener. A host name
// (other than localhost) is resolved only at the bind: it clashes with a
// listener on every address of both families, whatever it resolves to.
func (v *validator) adminClash(listeners []seenAddr) {
	if v.cfg.Admin == "" {
		return
	}
	ip, port, err := parseAddr(v.cfg.Admin, adminAddr)
	if err != nil {
		return // admin reported it
	}
	host, _, _ := net.SplitHostPort(v.cfg.Admin)
	named := host != "" && !ip.IsValid()
	if strings.EqualFold(host, "localhost") {
		ip, named = netip.AddrFrom4([4]byte{127, 0, 0, 1}), false // what net.Listen binds
	}
	admin := seenAddr{addr: ip, port: port}
	for _, l := range listeners {
		clash := overlaps(admin, l)
		if named {
			clash = port != 0 && port == l.port && (!l.addr.IsValid() || l.addr == netip.IPv6Unspecified())
		}
		if !clash {
			continue
		}
		how := "overlaps"
		if !named && admin.addr == l.addr {
			how = "is the same address as"
		}
		v.errorf("admin", "admin address %s %s listen address %s of listeners[%d]%s; both cannot be bound", v.cfg.Admin, how, l.text, l.index, v.onLine(l.index))
		return
	}
}

func (v *validator) listenerName(p string, i int, l *Listener, names map[string]int) {
	switch {
	case l.Name == "":
		v.errorf(p+".name", "missing required key \"name\"")
	case !listenerNameRE.MatchString(l.Name):
		v.errorf(p+".name", "name %q may only contain letters, digits and . _ : -", l.Name)
	default:
		if first, ok := names[l.Name]; ok {
			v.errorf(p+".name", "duplicate listener name %q (first used by listeners[%d]%s)", l.Name, first, v.onLine(first))
			return
		}
		names[l.Name] = i
	}
}

func (v *validator) listenAddr(p string, i int, l *Listener, seen *[]seenAddr) {
	if l.Listen == "" {
		v.errorf(p+".listen", "missing required key \"listen\"")
		return
	}
	addr, port, err := parseAddr(l.Listen, listenAddr)
	if err != nil {
		v.errorf(p+".listen", "%v", err)
		return
	}
	this := seenAddr{index: i, addr: addr, port: port, text: l.Listen}
	for _, other := range *seen {
		if !overlaps(this, other) {
			continue
		}
		how := "overlaps"
		if this.addr == other.addr {
			how = "is the same address as"
		}
		v.errorf(p+".listen", "listen address %s %s %s of listeners[%d]%s; both cannot be bound", l.Listen, how, other.text, other.index, v.onLine(other.index))
		return
	}
	*seen = append(*seen, this)
}

// overlaps reports whether two listen addresses cannot both be bound: the
// same address and port, or a wildcard and any address of its family on the
// same port (Linux refuses that bind even with SO_REUSEADDR). Port 0 asks
// the kernel for a free port, so it never conflicts.
func overlaps(a, b seenAddr) bool {
	if a.port != b.port || a.port == 0 {
		return false
	}
	return covers(a.addr, b.addr) || covers(b.addr, a.addr)
}

// covers reports whether binding wildcard also binds addr. An empty host
// (invalid netip.Addr) and :: bind both families, as Go listens dual-stack.
func covers(wildcard, addr netip.Addr) bool {
	switch {
	case !wildcard.IsValid() || wildcard == netip.IPv6Unspecified():
		return true
	case wildcard == netip.IPv4Unspecified():
		return !addr.IsValid() || addr.Unmap().Is4() || addr == netip.IPv6Unspecified()
	}
	return wildcard.Unmap() == addr.Unmap()
}

func (v *validator) proxyKind(p string, l *Listener) {
	switch {
	case slices.Contains(ProxyKinds, l.Proxy):
	case slices.Contains(plannedProxyKinds, l.Proxy):
		v.errorf(p+".proxy", "proxy %q is not implemented yet (available: %s)", l.Proxy, strings.Join(ProxyKinds, ", "))
	default:
		v.errorf(p+".proxy", "unknown proxy %q (allowed: %s)", l.Proxy, strings.Join(ProxyKinds, ", "))
	}
}

func (v *validator) upstreams(p string, l *Listener) {
	if l.Proxy == "tcp" && len(l.Upstream) == 0 && !l.RoutesByHello() {
		v.errorf(p+".upstream", "proxy tcp needs at least one upstream host:port")
	}
	v.poolServers(p+".upstream", l.Upstream)
	if l.Balance != "" {
		v.oneOf(p+".balance", l.Balance, Balances)
	}
}

func (v *validator) engine(p string, l *Listener) {
	switch {
	case !slices.Contains(EngineNames, l.Engine):
		v.errorf(p+".engine", "unknown engine %q (allowed: %s)", l.Engine, strings.Join(EngineNames, ", "))
	case l.Engine == "sockmap" && !v.cfg.Engines.Sockmap.Enabled:
		v.errorf(p+".engine", "engine sockmap is switched off by engines.sockmap.enabled: false")
	case l.Engine == "ip" && !v.cfg.Engines.IP.Enabled:
		v.errorf(p+".engine", "engine ip is switched off by engines.ip.enabled: false")
	}
}

func (v *validator) oneOf(path, value string, allowed []string) {
	if !slices.Contains(allowed, value) {
		v.errorf(path, "unknown value %q (allowed: %s)", value, strings.Join(allowed, ", "))
	}
}

func (v *validator) notNegative(path string, d Duration) {
	if d < 0 {
		v.errorf(path, "must not be negative, got %s", d)
	}
}

// positiveOrLeftOut checks a key whose zero value stands for its default
// def: a 0 written in the file is refused, since HAProxy's and Envoy's
// users read it as "no limit" and would get def instead. (A Config built
// in code has no file, and 0 is its way to ask for def.)
func (v *validator) positiveOrLeftOut(path string, value int64, shown string, def any) {
	switch {
	case value < 0:
		v.errorf(path, "must not be negative, got %s", shown)
	case value == 0 && v.written(path):
		v.errorf(path, "must be greater than 0; leave the key out for its default (%v)", def)
	}
}

// written reports whether path was given a value in the file.
func (v *validator) written(path string) bool {
	n, ok := v.nodes[path]
	return ok && !isNull(n)
}

// onLine says where listener i starts, when it came from a file.
func (v *validator) onLine(i int) string {
	if line := v.cfg.Listeners[i].Line; line > 0 {
		return " on line " + strconv.Itoa(line)
	}
	return ""
}

// addrRule says what an address key accepts.
type addrRule struct {
	hostnames bool // a DNS name is allowed as well as an IP
	needHost  bool // an empty host (all addresses) is not allowed
	minPort   int  // 0 lets the kernel pick a port
}

var (
	listenAddr   = addrRule{}
	adminAddr    = addrRule{hostnames: true}
	upstreamAddr = addrRule{hostnames: true, needHost: true, minPort: 1}
)

// parseAddr checks a host:port against rule and returns the IP (invalid if
// the host is empty or a name) and port.
func parseAddr(s string, rule addrRule) (netip.Addr, uint16, error) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("bad address %q: %s", s, splitProblem(err))
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || int(port) < rule.minPort {
		return netip.Addr{}, 0, fmt.Errorf("bad port %q in %q: expected a number from %d to 65535", portStr, s, rule.minPort)
	}
	if host == "" {
		if rule.needHost {
			return netip.Addr{}, 0, fmt.Errorf("bad address %q: missing host", s)
		}
		return netip.Addr{}, uint16(port), nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, uint16(port), nil
	}
	if !rule.hostnames {
		return netip.Addr{}, 0, fmt.Errorf("bad address %q: host %q is not an IP address (use an IPv4 address, [IPv6] in brackets, or nothing for all addresses)", s, host)
	}
	if looksNumeric(host) || !isHostname(host) {
		return netip.Addr{}, 0, fmt.Errorf("bad address %q: %q is neither an IP address nor a host name", s, host)
	}
	return netip.Addr{}, uint16(port), nil
}

func splitProblem(err error) string {
	msg := err.Error()
	var ae *net.AddrError
	if errors.As(err, &ae) {
		msg = ae.Err
	}
	switch msg {
	case "missing port in address":
		return "missing port (expected host:port)"
	case "too many colons in address":
		return "too many colons (write IPv6 addresses in brackets, like [::1]:80)"
	}
	return msg
}

// looksNumeric reports whether host is all digits and dots, that is, meant
// as an IPv4 address but not a valid one (10.0.0.256), rather than a name.
func looksNumeric(host string) bool {
	return strings.Trim(host, "0123456789.") == ""
}

// isHostname checks DNS name syntax: dot-separated labels of letters,
// digits, '-' and '_', each 1 to 63 characters, not starting or ending with
// '-'.
func isHostname(host string) bool {
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return false
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		if strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
			return false
		}
	}
	return true
}
