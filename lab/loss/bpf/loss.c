/* loss.c: a tcx program that drops a configurable random fraction of packets, standing in for netem's loss on kernels built without netem. */
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

/*
 * The tcx verdicts, spelled with their legacy tc names because the uapi
 * headers here predate TCX_NEXT/TCX_DROP (6.6): TCX_NEXT == TC_ACT_UNSPEC,
 * TCX_DROP == TC_ACT_SHOT.
 */
#define VERDICT_NEXT TC_ACT_UNSPEC
#define VERDICT_DROP TC_ACT_SHOT

/* Indices into loss_counters; Go reads them through the generated LossCounter. */
enum counter {
	COUNTER_PASSED = 0,
	COUNTER_DROPPED_RANDOM_LOSS = 1,
	COUNTER_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} loss_counters SEC(".maps");

/*
 * drop_below is the loss probability scaled to 2^32: a packet is dropped when
 * a 32-bit random number falls below it, so 0 passes everything and 1<<32
 * drops everything. It is 64 bits wide so that 100% is representable. Go
 * changes it at run time through the mmapped .bss, without reattaching.
 */
__u64 drop_below = 0;

/* Keeps enum counter in the BTF so that bpf2go can generate it for Go. */
const enum counter *unused_counter __attribute__((unused));

static __always_inline void count(__u32 which)
{
	__u64 *value = bpf_map_lookup_elem(&loss_counters, &which);

	/* Per-CPU slot: this CPU is the only writer, so no atomic is needed. */
	if (value)
		*value += 1;
}

SEC("tc")
int random_loss(struct __sk_buff *skb)
{
	if ((__u64)bpf_get_prandom_u32() < drop_below) {
		count(COUNTER_DROPPED_RANDOM_LOSS);
		/* Why: emulate a lossy wire; the receiver never sees the packet and the sender is not told. */
		return VERDICT_DROP;
	}
	count(COUNTER_PASSED);
	/* Why: not ours to decide; programs attached after us (an engine under test) still see the packet. */
	return VERDICT_NEXT;
}

char __license[] SEC("license") = "Dual MIT/GPL";
