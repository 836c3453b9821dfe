// Back-end servers an operator drained, handed to the binary an upgrade starts: a server drained for maintenance stays drained across `splicer upgrade`.

package supervisor

import (
	"encoding/json"
	"log/slog"
	"os"

	"github.com/splicer/splicer/forwarder"
)

// drainedEnv carries the drained servers to the new process, as JSON.
const drainedEnv = "SPLICER_DRAINED"

// drainedServer is one server drained in one listener's pool.
type drainedServer struct {
	Listener string `json:"listener"`
	Pool     string `json:"pool"`
	Server   string `json:"server"`
}

// passDrained puts f's drained servers in the environment the upgrade's
// new process inherits; restore takes them out again.
func passDrained(f *forwarder.Forwarder) (restore func()) {
	var drained []drainedServer
	for _, u := range f.Upstreams() {
		if u.Drained {
			drained = append(drained, drainedServer{u.Listener, u.Pool, u.Server})
		}
	}
	if len(drained) == 0 {
		return func() {}
	}
	b, _ := json.Marshal(drained) // plain strings: cannot fail
	os.Setenv(drainedEnv, string(b))
	return func() { os.Unsetenv(drainedEnv) }
}

// takeDrained drains in f the servers the process this one replaces had
// drained, where f's configuration still has them, and takes them out of
// the environment (a later upgrade passes its own).
func takeDrained(f *forwarder.Forwarder, log *slog.Logger) {
	v, ok := os.LookupEnv(drainedEnv)
	if !ok {
		return
	}
	os.Unsetenv(drainedEnv)
	var drained []drainedServer
	if err := json.Unmarshal([]byte(v), &drained); err != nil {
		log.Warn("upgrade: the drained servers handed over do not parse; none is drained", "err", err)
		return
	}
	for _, d := range drained {
		if len(f.DrainUpstream(d.Listener, d.Pool, d.Server, true)) == 0 {
			log.Warn("upgrade: a server drained before is not in this configuration", "listener", d.Listener, "pool", d.Pool, "server", d.Server)
		}
	}
}
