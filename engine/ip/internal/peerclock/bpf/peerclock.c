/* peerclock.c: a tc program never attached, run on demand with BPF_PROG_TEST_RUN: it finds two of the forwarder's TCP sockets by their 4-tuples and reads the latest TSval each accepted from its peer (tp->rx_opt.ts_recent), the sequence numbers, queues and windows a splice needs, and whether segments wait out of order. */
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "peerclock.h"

/* Reading kernel structures through BTF needs a GPL-compatible program. */
char LICENSE[] SEC("license") = "Dual BSD/GPL";

const enum peerclock_family *unused_peerclock_family __attribute__((unused));
const enum peerclock_layout *unused_peerclock_layout __attribute__((unused));
const struct peerclock_query *unused_peerclock_query __attribute__((unused));

/*
 * CO-RE views of the kernel's structures: only the fields read. The loader
 * relocates each access to the running kernel's layout (vmlinux BTF), and
 * refuses the program if a field is missing.
 */
struct tcp_options_received {
	int ts_recent_stamp;
	__u32 ts_recent;
	__u16 mss_clamp;
} __attribute__((preserve_access_index));

struct rb_root {
	void *rb_node;
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 rcv_nxt;
	__u32 copied_seq;
	__u32 rcv_wup;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 snd_wl1;
	__u32 snd_wnd;
	__u32 max_window;
	__u32 rcv_wnd;
	__u32 write_seq;
	__u32 tsoffset;
	__u16 urg_data;
	struct tcp_options_received rx_opt;
	struct rb_root out_of_order_queue;
} __attribute__((preserve_access_index));

static __always_inline void read_sock(struct __sk_buff *skb, struct peerclock_sock *s, __u64 netns)
{
	struct bpf_sock *sk;
	struct tcp_sock *tp;

	s->found = 0;
	if (s->family == PEERCLOCK_AF_INET)
		sk = bpf_sk_lookup_tcp(skb, &s->tuple, sizeof(s->tuple.ipv4), netns, 0);
	else if (s->family == PEERCLOCK_AF_INET6)
		sk = bpf_sk_lookup_tcp(skb, &s->tuple, sizeof(s->tuple.ipv6), netns, 0);
	else
		return;
	if (!sk)
		return;
	s->state = sk->state;
	tp = bpf_skc_to_tcp_sock(sk);
	if (tp) {
		s->found = 1;
		s->ts_recent = tp->rx_opt.ts_recent;
		s->ts_recent_stamp = tp->rx_opt.ts_recent_stamp;
		s->rcv_nxt = tp->rcv_nxt;
		s->write_seq = tp->write_seq;
		s->copied_seq = tp->copied_seq;
		s->snd_una = tp->snd_una;
		s->snd_nxt = tp->snd_nxt;
		s->snd_wl1 = tp->snd_wl1;
		s->snd_wnd = tp->snd_wnd;
		s->max_window = tp->max_window;
		s->rcv_wnd = tp->rcv_wnd;
		s->rcv_wup = tp->rcv_wup;
		s->mss_clamp = tp->rx_opt.mss_clamp;
		s->urg_data = tp->urg_data;
		s->tsoffset = tp->tsoffset;
		s->out_of_order = tp->out_of_order_queue.rb_node != 0;
	}
	bpf_sk_release(sk);
}

SEC("tc")
int peerclock_read(struct __sk_buff *skb)
{
	struct peerclock_query q;
	__u64 netns;

	if (bpf_skb_load_bytes(skb, PEERCLOCK_QUERY_OFFSET, &q, sizeof(q)))
		return TC_ACT_SHOT; /* the frame is shorter than a query: the caller's bug, nothing read */
	/* An id names a namespace other than the caller's, as the caller's sees it: no setns needed. */
	netns = q.netns < 0 ? BPF_F_CURRENT_NETNS : (__u64)q.netns;
	read_sock(skb, &q.sock[0], netns);
	read_sock(skb, &q.sock[1], netns);
	q.now_ns = bpf_ktime_get_ns();
	if (bpf_skb_store_bytes(skb, PEERCLOCK_QUERY_OFFSET, &q, sizeof(q), 0))
		return TC_ACT_SHOT; /* the answer could not be written back: the caller must not read it */
	return TC_ACT_OK; /* the answer is in the frame (the verdict of a run on demand, never of a real packet) */
}
