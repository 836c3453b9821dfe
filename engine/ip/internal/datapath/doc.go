// Package datapath is engine ip's datapath: a tc BPF program that turns the packets of one TCP connection into packets of another, so the forwarder runs no TCP for a spliced pair.
//
// A pair is connection A (client <-> forwarder) and connection B (forwarder
// <-> server). Once the control plane has frozen both sockets and computed
// the offsets between their sequence and timestamp spaces, it inserts the
// pair with Insert; from then on the program at tc ingress (tcx) of the
// forwarder's devices rewrites each segment of A into a segment of B and
// redirects it out of B's device, and the mirror for B -> A:
//
//	out.saddr, out.sport = forwarder's address/port on B;  out.daddr, out.dport = server's
//	out.seq   = in.seq + SeqOff[A->B]
//	out.ack   = in.ack - SeqOff[B->A]
//	SACK edge = edge - SeqOff[B->A]
//	TSval     = in.TSval + TSOff[A->B];  TSecr = in.TSecr - TSOff[B->A]
//	window    = min(65535, (W << InShift) >> OutShift)
//
// Checksums are updated by difference with the kernel helpers, so
// CHECKSUM_PARTIAL, CHECKSUM_COMPLETE and GSO/GRO super-packets stay right.
//
// The program drops, with a per-CPU counter named after the reason (Drops):
// SYNs on a spliced tuple (but the server's retransmitted SYN-ACK, which
// it answers with the ACK the frozen socket would have sent), segments
// whose seq or ack lies further than the largest window advertised (blind
// resets and injections), FINs behind their sender's next byte, IPv6
// segments behind extension headers (which would otherwise reach the
// frozen socket), malformed headers. What
// reaches a pair while it changes hands it keeps instead, for the control
// plane (Kept): every segment while a pair inserted with PairSpec.Keep is
// held and published (until StopKeeping), and data past a watched or
// limited direction's boundary (until Release hands the next ones to the
// stack); a segment its bounded ring cannot take is dropped as
// hold_dropped. It tracks per direction the highest
// seq sent, highest ack, last window, latest TSval, bytes and packets, and
// runs the teardown of SpliceNP 2.2: FIN each way, each acknowledged, puts
// the pair in TIME_WAIT, which Sweep removes after Options.TimeWait; a reset
// the receiver will accept closes the pair at once; Options.IdleTimeout
// reclaims pairs whose ends vanished. Transitions and watch/limit stops are
// reported through ReadEvent.
//
// Typical use by the control plane:
//
//	dp, err := datapath.Load(datapath.Options{})
//	dp.Attach(clientSideIfindex); dp.Attach(serverSideIfindex)
//	if err := datapath.CanTranslate(a, b); err != nil { /* fall back, say why */ }
//	spec, _ := datapath.NewPairSpec(a, b)
//	dp.Insert(spec)            // spec.Up.Mode = engine.Hold and spec.Keep first: packets in flight are kept
//	dp.Update(spec)            // then publish the final offsets with Mode = engine.Forward (Keep still set)
//	dp.StopKeeping(spec.A, d, n) // once the n kept segments (dp.Kept) are in the published spec
//	st, _ := dp.Lookup(spec.A) // byte counters for /flows
//	dp.Sweep(datapath.Now())   // periodically
//
// Needs Linux 6.6 (tcx), CAP_BPF and CAP_NET_ADMIN; amd64 (bpfel). See
// engine/ip/README.md for the state layout and its size per pair, and for what the
// control plane does not do yet.
package datapath
