// TCP keepalive of a listener's connections: the tcp_keepalive section, its default and its checks.

package config

import (
	"strconv"
	"time"
)

// TCPKeepalive is how a listener probes its idle connections, the client's
// and every upstream connection it dials, to find a peer that vanished
// without a FIN or a reset (a host that lost power, a NAT or firewall
// that dropped the flow): after Idle without a byte either way the
// kernel sends a probe, then one every Interval, and after Count probes
// unanswered the connection fails and its pair ends (close reason
// peer_timeout; the other side is reset). Idle 0 switches keepalive off, as
// HAProxy leaves it unless `option clitcpka`/`srvtcpka` asks.
//
// While engine ip splices a pair the forwarder's sockets are frozen and
// send nothing: the two ends' own probes pass through the forwarder.
type TCPKeepalive struct {
	Idle     Duration `yaml:"idle"`
	Interval Duration `yaml:"interval"`
	Count    int      `yaml:"count"`
}

// On reports whether the connections are probed at all.
func (k TCPKeepalive) On() bool { return k.Idle > 0 }

// DefaultTCPKeepalive is Go's own default for the connections it accepts
// and dials (15 s, 15 s, 9 probes), which splicer had before the key: a
// vanished peer is found within 2.5 minutes.
var DefaultTCPKeepalive = TCPKeepalive{
	Idle:     Duration(15 * time.Second),
	Interval: Duration(15 * time.Second),
	Count:    9,
}

// The kernel's bounds (include/net/tcp.h): TCP_KEEPIDLE and TCP_KEEPINTVL
// are whole seconds up to MAX_TCP_KEEPIDLE and MAX_TCP_KEEPINTVL,
// TCP_KEEPCNT up to MAX_TCP_KEEPCNT.
const (
	maxKeepaliveSeconds = 32767
	maxKeepaliveCount   = 127
)

// tcpKeepalive checks a listener's tcp_keepalive section; with idle 0
// (off) the other keys are not used, and not checked.
func (v *validator) tcpKeepalive(p string, k TCPKeepalive) {
	p += ".tcp_keepalive"
	v.notNegative(p+".idle", k.Idle)
	if !k.On() {
		return
	}
	v.keepaliveSeconds(p+".idle", k.Idle)
	v.keepaliveSeconds(p+".interval", k.Interval)
	if k.Count < 1 || k.Count > maxKeepaliveCount {
		v.errorf(p+".count", "must be from 1 to %d probes, got %d", maxKeepaliveCount, k.Count)
	}
}

// keepaliveSeconds checks that d is a whole number of seconds the kernel
// takes: it counts keepalive times in seconds, and rounding a value the
// operator wrote would probe at a time they did not ask for.
func (v *validator) keepaliveSeconds(path string, d Duration) {
	s := d.Std()
	switch {
	case s < time.Second || s > maxKeepaliveSeconds*time.Second:
		v.errorf(path, "must be from 1s to %ds, got %s", maxKeepaliveSeconds, d)
	case s%time.Second != 0:
		v.errorf(path, "must be whole seconds (the kernel counts keepalive in seconds), got %s; try %s", d, strconv.FormatInt(int64(s.Round(time.Second)/time.Second), 10)+"s")
	}
}
