// Package ip is engine ip: a tc BPF program splices a pair by turning the packets of one TCP connection into packets of the other, so the forwarder runs no TCP for it.
//
// Engine is the control plane as an engine.Engine: it splices pairs whose
// queues are empty (holding them, freezing both sockets with TCP_REPAIR,
// learning the peers' timestamp clocks, publishing, and leaving the sockets
// in repair mode for the forwarder to close silently: Options.OnDetached)
// and falls back with the reason otherwise:
//
//	e := ip.New(ip.Options{}, log)
//	err := e.Probe()                  // in the namespace whose devices reach clients and servers
//	res, err := e.Splice(ctx, pair, engine.Both(idle))
//
// Needs Linux 6.6 (tcx), CAP_BPF and CAP_NET_ADMIN; amd64 (bpfel). The
// datapath (the program, its maps and events), freezing and rebuilding
// sockets with TCP_REPAIR, and the test packet builder live in internal
// packages; README.md describes the layout, the state per pair, and what
// the control plane does not do yet.
package ip
