// The optional engine capabilities ip has (see engine.SegmentRelay, engine.MinLimited).

package ip

// RelaysSegments implements engine.SegmentRelay: the datapath passes each
// segment on unchanged in size, so the upstream must announce the client's MSS.
func (e *Engine) RelaysSegments() bool { return true }

// MinLimit implements engine.MinLimited: Options.MinLimit
// (engines.ip.min_body), below which Supports declines a limited splice.
func (e *Engine) MinLimit() int64 { return e.opts.MinLimit }
