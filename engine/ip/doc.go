// Package ip is engine ip: a tc BPF program splices a pair by turning the packets of one TCP connection into packets of the other, so the forwarder runs no TCP for it.
//
// Engine is the control plane as an engine.Engine. It splices a pair at
// any point of its streams: it holds the pair in the datapath (which
// keeps every segment that arrives meanwhile), freezes both sockets with
// TCP_REPAIR, learns the peers' timestamp clocks, publishes the
// translation, and delivers the bytes the forwarder held for either
// peer (draining). A splice that cannot give the pair back lets the
// forwarder close both sockets silently (engine.Options.OnDetached) and
// may follow the pair on its own (engine.Options.OnEnd); with a byte
// limit, a watched or held direction or a timer, the sockets stay frozen
// and are rebuilt in place when the pair is given back in control mode
// (unsplicing). When the pair cannot be spliced, Splice falls back with
// the reason (an *engine.FallbackError), the connections as they were:
//
//	e := ip.New(ip.Options{}, log)
//	err := e.Probe()                  // in the namespace whose devices reach clients and servers
//	res, err := e.Splice(ctx, pair, engine.Both(idle))
//
// With Options.PinDir spliced pairs can outlive the process
// (engine.Outliving, engine.Adopting); with Options.LocalPorts the
// engine hands out the upstream connections' local ports
// (engine.UpstreamPorts) and holds each spliced pair's port while the
// pair is in the datapath, handing it out again once the pair has been
// in TIME_WAIT a second and its timestamps make a new connection on the
// 4-tuple safe, as the kernel's tcp_tw_reuse does.
//
// Needs Linux 6.6 (tcx), CAP_BPF and CAP_NET_ADMIN; amd64 (bpfel). The
// datapath (the program, its maps and events), freezing and rebuilding
// sockets with TCP_REPAIR, and the test packet builder live in internal
// packages; README.md describes the layout, the state per pair, and what
// the control plane does not do yet.
package ip
