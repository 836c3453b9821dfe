// Package peerclock reads, from two of the forwarder's TCP sockets, the latest TSval each accepted from its peer (tp->rx_opt.ts_recent), with a small BPF program run on demand: no segment is sent to learn a peer's timestamp clock. The same run reads the sequence numbers, queues and windows a splice needs from the frozen sockets, which socket options take a dozen system calls per socket to report.
//
// No socket option reports ts_recent. The program is a tc program that is
// never attached: BPF_PROG_TEST_RUN runs it once per query, in the calling
// thread's network namespace; it looks both sockets up by their 4-tuples
// (bpf_sk_lookup_tcp), reads their tcp_sock through BTF
// (bpf_skc_to_tcp_sock, CO-RE-relocated field reads) and writes the
// answers back into the frame it was given. Loading needs CAP_BPF and
// CAP_PERFMON (BTF reads of kernel structures), Linux 5.9 or later and the
// kernel's BTF (/sys/kernel/btf/vmlinux).
package peerclock
