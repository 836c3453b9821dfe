// The forwarder as its admin endpoints see it (internal/admin.Forwarder): documents ready to encode as JSON, so that admin imports none of the forwarder's types.

package forwarder

// FlowsReport is the document of GET /flows: a snapshot of every pair.
func (f *Forwarder) FlowsReport() any { return f.flows.Snapshot() }

// UpstreamsReport is the document of GET /upstreams (Upstreams).
func (f *Forwarder) UpstreamsReport() any { return f.Upstreams() }

// DrainReport is DrainUpstream for POST /upstreams/drain and /ready: the
// servers' new state, and whether any running listener had the server.
func (f *Forwarder) DrainReport(listener, pool, server string, on bool) (doc any, found bool) {
	got := f.DrainUpstream(listener, pool, server, on)
	return got, len(got) > 0
}
