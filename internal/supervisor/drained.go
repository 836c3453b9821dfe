// Back-end servers an operator drained, handed to the binary an upgrade starts: a server drained for maintenance stays drained across `splicer upgrade`.

package supervisor

import (
	"log/slog"

	"github.com/splicer/splicer/forwarder"
)

// drained are f's drained servers, which the upgrade's new process
// is handed (drainedEnviron).
func drained(f *forwarder.Forwarder) []drainedServer {
	var out []drainedServer
	for _, u := range f.Upstreams() {
		if u.Drained {
			out = append(out, drainedServer{u.Listener, u.Pool, u.Server})
		}
	}
	return out
}

// takeDrained drains in f the servers the process this one replaces had
// drained (st.Drained), where f's configuration still has them.
func takeDrained(f *forwarder.Forwarder, st State, log *slog.Logger) {
	if st.DrainedErr != nil {
		log.Warn("upgrade: the drained servers handed over do not parse; none is drained", "err", st.DrainedErr)
		return
	}
	for _, d := range st.Drained {
		if len(f.DrainUpstream(d.Listener, d.Pool, d.Server, true)) == 0 {
			log.Warn("upgrade: a server drained before is not in this configuration", "listener", d.Listener, "pool", d.Pool, "server", d.Server)
		}
	}
}
