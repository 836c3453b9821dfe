/* peerclock.h: the ABI between the peerclock program and its Go loader: one query naming two of the forwarder's TCP sockets, and what the program read from each. */
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#ifndef PEERCLOCK_H
#define PEERCLOCK_H

#include <linux/bpf.h>
#include <linux/types.h>

/* peerclock_sock.family values (the kernel's AF_INET, AF_INET6). */
enum peerclock_family {
	PEERCLOCK_AF_INET = 2,
	PEERCLOCK_AF_INET6 = 10,
};

/* Where the query starts in the frame BPF_PROG_TEST_RUN is given: after the Ethernet header it insists on. */
enum peerclock_layout {
	PEERCLOCK_QUERY_OFFSET = 14,
};

/*
 * peerclock_sock names one socket by its 4-tuple and receives what the
 * program read from it. The tuple is the one a segment from the socket's
 * peer carries: saddr/sport the peer's, daddr/dport the forwarder's.
 * Besides the peer's clock, the program reads the sequence numbers,
 * queues and windows a splice needs from a frozen socket, which would
 * take a dozen system calls per socket (TCP_REPAIR_QUEUE, TCP_QUEUE_SEQ,
 * SIOCINQ, SIOCOUTQ, TCP_MAXSEG, TCP_REPAIR_WINDOW).
 */
struct peerclock_sock {
	struct bpf_sock_tuple tuple; /* in */
	__u32 family;		     /* in: enum peerclock_family */
	__u32 found;		     /* out: 1 if a full TCP socket has the tuple */
	__u32 state;		     /* out: its TCP state (BPF_TCP_ESTABLISHED...) */
	__u32 ts_recent;	     /* out: tp->rx_opt.ts_recent, the latest TSval it accepted from its peer */
	__s32 ts_recent_stamp;	     /* out: tp->rx_opt.ts_recent_stamp, CLOCK_MONOTONIC seconds when stored; 0: never */
	__u32 rcv_nxt;		     /* out: tp->rcv_nxt (TCP_QUEUE_SEQ of the receive queue) */
	__u32 write_seq;	     /* out: tp->write_seq (TCP_QUEUE_SEQ of the send queue) */
	__u32 copied_seq;	     /* out: tp->copied_seq: rcv_nxt less it is the receive queue (SIOCINQ) */
	__u32 snd_una;		     /* out: tp->snd_una: write_seq less it is the send queue (SIOCOUTQ) */
	__u32 snd_nxt;		     /* out: tp->snd_nxt */
	__u32 snd_wl1;		     /* out: TCP_REPAIR_WINDOW's fields: tp->snd_wl1 */
	__u32 snd_wnd;		     /* out: tp->snd_wnd */
	__u32 max_window;	     /* out: tp->max_window */
	__u32 rcv_wnd;		     /* out: tp->rcv_wnd */
	__u32 rcv_wup;		     /* out: tp->rcv_wup */
	__u16 mss_clamp;	     /* out: tp->rx_opt.mss_clamp (TCP_MAXSEG in repair mode) */
	__u16 urg_data;		     /* out: tp->urg_data: urgent data pending makes SIOCINQ count differently */
	__u32 tsoffset;		     /* out: tp->tsoffset: TCP_TIMESTAMP is the clock (ms or us of now_ns) plus it */
	__u32 out_of_order;	     /* out: 1 if tp->out_of_order_queue holds segments, which no socket option reads */
};

/* One run reads both sockets of a pair. */
struct peerclock_query {
	struct peerclock_sock sock[2];
	__s32 netns; /* in: the sockets' namespace by its id in the caller's (a netnsid); negative: the caller's own */
	__u32 pad;
	__u64 now_ns; /* out: bpf_ktime_get_ns() (CLOCK_MONOTONIC) when read, to age ts_recent_stamp */
};

#endif
