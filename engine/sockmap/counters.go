// The engine's counters by name, for splicer_engine_events_total and (the *_bytes ones) splicer_engine_bytes_total.

package sockmap

// Counters implements engine.Counters.
func (e *Engine) Counters() map[string]uint64 {
	s := e.Stats()
	return map[string]uint64{
		"splices":        s.Splices,
		"fallbacks":      s.Fallbacks,
		"give_backs":     s.GiveBacks,
		"pauses":         s.Pauses,
		"kernel_bytes":   s.KernelBytes,
		"user_bytes":     s.UserBytes,
		"redirects":      s.Redirects,
		"parser_stops":   s.ParserStops,
		"drop_no_state":  s.DropsNoState,
		"drop_no_peer":   s.DropsNoPeer,
		"events_lost":    s.EventsLost,
		"ringbuf_errors": s.RingbufErrors,
	}
}
