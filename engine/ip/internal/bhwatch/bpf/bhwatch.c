/* bhwatch.c: two small programs that tell the control plane whether a CPU may still be carrying a segment from tc ingress to its socket: a tcx ingress program, first on each device, marks its CPU busy; a raw tracepoint at the end of each NET_RX softirq run marks it done. */
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "bhwatch.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))

const struct bhwatch_cpu *unused_bhwatch_cpu __attribute__((unused));
const enum bhwatch_const *unused_bhwatch_const __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct bhwatch_cpu);
	__uint(max_entries, 1);
} bhwatch_cpus SEC(".maps");

SEC("tc")
int bhwatch_mark(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct bhwatch_cpu *c = bpf_map_lookup_elem(&bhwatch_cpus, &zero);

	/*
	 * An exchange, not a plain store: it is a full barrier (x86's xchg),
	 * so the mark is visible before the datapath program, next in the
	 * chain, looks the segment's flow up. The control plane inserts a
	 * pair and then reads the marks: either the datapath sees the pair,
	 * or the control plane sees the mark.
	 *
	 * Only the first segment of a NET_RX run finds its CPU clear; the
	 * others skip the exchange, a locked instruction per segment. Only
	 * this CPU writes its slot (the marker and the tracepoint run here),
	 * so a mark read as set is this CPU's own, left by an exchange that
	 * came before in its program order and has not been cleared since.
	 * That exchange's barrier already orders the mark before every later
	 * lookup, this segment's among them; and a control plane that finds
	 * the mark clear after it has seen the end of the run that carried
	 * this segment to its socket.
	 */
	if (c && !READ_ONCE(c->busy))
		__sync_lock_test_and_set(&c->busy, 1);
	return TC_ACT_UNSPEC; /* TCX_NEXT: the segment goes on to the datapath program, untouched */
}

SEC("raw_tracepoint/softirq_exit")
int bhwatch_done(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 zero = 0;
	struct bhwatch_cpu *c;

	if (ctx->args[0] != BHWATCH_NET_RX_SOFTIRQ)
		return 0; /* another softirq: it carries no segment to a socket */
	c = bpf_map_lookup_elem(&bhwatch_cpus, &zero);
	if (c && c->busy) {
		c->busy = 0;
		c->exits++;
	}
	return 0;
}
