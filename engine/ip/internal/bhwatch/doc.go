// Package bhwatch tells, in one system call, whether every CPU has delivered the segments that passed tc ingress before a given moment: the grace period a splice waits for before its reading of the sockets is final, without waking every CPU.
//
// A segment goes from tc ingress to its socket within one NET_RX softirq
// run (or one section with bottom halves disabled, which a NET_RX run on
// that CPU can only follow). Two small programs keep, per CPU, a mark and
// a count: a tcx ingress program, attached first on each of the engine's
// devices, sets its CPU's mark for every segment (only the first of a run
// finds it clear and writes it); a raw tracepoint at the end of each
// NET_RX softirq run clears it and counts the run. After a
// pair is inserted, a CPU whose mark is clear, or whose count moved,
// carries no segment that passed tc before the insert. Waking a thread on
// every CPU proves the same (tcprepair's visitors) but costs a wakeup of
// each, 25-70 µs on a virtual machine whose other CPU is idle; reading the
// marks is one map lookup.
//
// A CPU that delivers segments outside softirqs (threaded NAPI, busy
// polling) clears its mark only at its next NET_RX run: WaitDone then
// gives up after its bound and the caller visits the CPUs. Segments that
// arrive on a device without the marker are not seen at all: the caller
// must attach it wherever the datapath is attached.
//
// Loading needs CAP_BPF and CAP_PERFMON (the raw tracepoint); attaching,
// CAP_NET_ADMIN and Linux 6.6 (tcx).
package bhwatch
