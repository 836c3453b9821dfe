// The optional engine capabilities ip has (see engine.SegmentRelay).

package ip

// RelaysSegments implements engine.SegmentRelay: the datapath passes each
// segment on unchanged in size, so the upstream must announce the client's MSS.
func (e *Engine) RelaysSegments() bool { return true }
