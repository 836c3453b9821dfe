// Engine ip's counters for metrics: the datapath's drops by reason and packets forwarded, pairs spliced with owed bytes and the packets that carried them, unsplices and failed unsplices, clock probes and clocks read, grace periods by the softirq watch and by visits, dials that found the port range exhausted.

package ip

import "sync/atomic"

// counts are what the engine counts of its own doing, for Counters (the
// datapath counts the rest): atomic, or under the lock of their own.
type counts struct {
	// drainedPairs counts pairs spliced with owed bytes, drainedBytes
	// those bytes.
	drainedPairs, drainedBytes atomic.Int64
	// windowRefused counts splices refused by windowsFit,
	// outOfOrderRefused those refused by outOfOrder.
	windowRefused, outOfOrderRefused atomic.Int64
	// unsplices counts unsplices and times them (unsplicestats.go).
	unsplices unspliceStats
}

// Counters implements engine.Counters: every datapath counter (drops by
// reason, "forwarded", "event_lost"), "drained_pairs" and
// "drained_bytes" (pairs spliced with bytes the forwarder held, and those
// bytes), "drained_packets" and "drained_gso_packets" (packets that
// carried owed bytes for the first time, and the GSO packets among them,
// each of several segments), "drained_retransmits" (owed segments sent
// again), "unsplices" (pairs given back in control mode) and
// "unsplice_failed" (pairs reset because they could not be given back
// safely), "clock_probes" (window probes sent to learn a peer's
// timestamp clock) and "clocks_read" (peers' clocks read from the
// forwarder's sockets instead), "graces_watched" and "graces_visited"
// (grace periods the softirq watch ended, and those it could not end,
// which visited every CPU), "window_refused" (limited splices refused
// because the sender may send past the receiver's window: windowsFit),
// "out_of_order_refused" (splices refused because a socket held
// segments past a hole, which its peer has SACKed: outOfOrder),
// "local_ports_exhausted" (dials from the port range toward a server to
// which every port of it was busy, which took a kernel port instead:
// UpstreamPort). Nothing else before the datapath is loaded.
func (e *Engine) Counters() map[string]uint64 {
	e.mu.Lock()
	dp := e.dp
	e.mu.Unlock()
	out := map[string]uint64{
		"drained_pairs":        uint64(e.counts.drainedPairs.Load()),
		"drained_bytes":        uint64(e.counts.drainedBytes.Load()),
		"drained_packets":      uint64(e.inject.drainPackets.Load()),
		"drained_gso_packets":  uint64(e.inject.drainGSO.Load()),
		"drained_retransmits":  uint64(e.inject.drainResent.Load()),
		"unsplices":            uint64(e.counts.unsplices.ok.Load()),
		"unsplice_failed":      uint64(e.counts.unsplices.failed.Load()),
		"clock_probes":         uint64(e.clocks.probes.Load()),
		"clocks_read":          uint64(e.clocks.read.Load()),
		"graces_watched":       uint64(e.devices.watched.Load()),
		"graces_visited":       uint64(e.devices.visited.Load()),
		"window_refused":       uint64(e.counts.windowRefused.Load()),
		"out_of_order_refused": uint64(e.counts.outOfOrderRefused.Load()),
	}
	e.ports.counters(out)
	if dp == nil {
		return out
	}
	if e.pins != nil {
		e.pins.counters(out) // adopted datapaths, and "adopted_pairs", "adopted_reset"
	}
	for _, read := range []func() (map[string]uint64, error){dp.Drops, dp.Counters} {
		m, err := read()
		if err != nil {
			continue // closed: the engine is shutting down
		}
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}
