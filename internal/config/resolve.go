// Keys of upstream servers found in DNS: a server's resolve and srv, and the resolver section of a pool or upstream list (nameservers, interval).

package config

import (
	"net/netip"
	"strings"
	"time"
)

// Resolver is how the servers of a pool (or upstream list) marked resolve,
// or given by srv, are looked up: nginx's resolver directive with its
// valid parameter.
type Resolver struct {
	// Nameservers are asked instead of /etc/resolv.conf's, each an IP
	// address with an optional port (default 53), in turn. Left out: the
	// system's, /etc/hosts first.
	Nameservers []string `yaml:"nameservers,omitempty"`
	// Interval is how often each name is looked up again (nginx's
	// valid=): a new address is used, and one gone gets no new
	// connections, within it. Default DefaultResolveInterval; at least
	// MinResolveInterval.
	Interval Duration `yaml:"interval,omitempty"`
}

// DefaultResolveInterval is nginx's and HAProxy's usual hold: short enough
// to follow a deployment, long enough not to load the name servers.
const DefaultResolveInterval = 30 * time.Second

// MinResolveInterval bounds interval from below: more often would load
// the name servers for no gain (records change in seconds at best).
const MinResolveInterval = time.Second

// ResolveInterval is r's interval, its default filled in (r may be nil).
func (r *Resolver) ResolveInterval() time.Duration {
	if r == nil || r.Interval <= 0 {
		return DefaultResolveInterval
	}
	return r.Interval.Std()
}

// NameserverAddrs are r's name servers as host:port, port 53 where none
// is given (r may be nil); invalid ones are left out (validated with the
// configuration).
func (r *Resolver) NameserverAddrs() []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, ns := range r.Nameservers {
		if ap, err := parseNameserver(ns); err == nil {
			out = append(out, ap.String())
		}
	}
	return out
}

// parseNameserver reads an IP address with an optional port.
func parseNameserver(s string) (netip.AddrPort, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(ip, 53), nil
	}
	return netip.ParseAddrPort(s)
}

// Resolves reports whether the server is looked up in DNS again and again
// (resolve, or srv).
func (s PoolServer) Resolves() bool { return s.Resolve || s.SRV != "" }

// serverAddress checks a server's address, or its srv, and resolve.
func (v *validator) serverAddress(p string, s PoolServer) {
	switch {
	case s.SRV != "" && s.Address != "":
		v.errorf(p+".srv", "give address or srv, not both: srv's records give the servers' addresses and ports")
	case s.SRV != "":
		v.srvName(p+".srv", s.SRV)
	case s.Address == "":
		v.errorf(p, "missing required key \"address\" (host:port), or \"srv\" (a DNS SRV name)")
	default:
		ip, _, err := parseAddr(s.Address, upstreamAddr)
		switch {
		case err != nil:
			v.errorf(p, "%v", err)
		case s.Resolve && ip.IsValid():
			v.errorf(p+".resolve", "%s is an IP address: resolve is for a server given by name", s.Address)
		}
	}
}

// srvName checks an SRV name: _service._proto.name, as RFC 2782 writes it.
func (v *validator) srvName(p, name string) {
	labels := strings.SplitN(strings.TrimSuffix(name, "."), ".", 3)
	switch {
	case strings.Contains(name, ":"):
		v.errorf(p, "%q: an SRV name has no port (its records give the ports)", name)
	case len(labels) < 3 || !strings.HasPrefix(labels[0], "_") || !strings.HasPrefix(labels[1], "_"):
		v.errorf(p, "%q is not an SRV name: expected _service._proto.name, e.g. _http._tcp.web.example", name)
	case !isHostname(name):
		v.errorf(p, "%q is not a DNS name", name)
	}
}

// resolver checks a resolver section; it is only used with servers that
// resolve, so one without them is refused as a mistake.
func (v *validator) resolver(p string, r *Resolver, servers []PoolServer) {
	if r == nil {
		return
	}
	for i, ns := range r.Nameservers {
		if _, err := parseNameserver(ns); err != nil {
			v.errorf(p+".nameservers["+itoa(i)+"]", "%q: expected an IP address, with an optional port (10.0.0.53, 10.0.0.53:5353, [2001:db8::53]:53)", ns)
		}
	}
	v.positiveOrLeftOut(p+".interval", int64(r.Interval), r.Interval.String(), DefaultResolveInterval)
	if r.Interval > 0 && r.Interval.Std() < MinResolveInterval {
		v.errorf(p+".interval", "expected at least %s, got %s", MinResolveInterval, r.Interval)
	}
	if len(servers) > 0 && !hasResolving(servers) {
		v.errorf(p, "no server has resolve: true or srv: the resolver would look nothing up")
	}
}

func hasResolving(servers []PoolServer) bool {
	for _, s := range servers {
		if s.Resolves() {
			return true
		}
	}
	return false
}
