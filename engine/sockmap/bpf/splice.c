// sk_skb stream parser and verdict that move a spliced pair's bytes from one socket's receive path to its peer's send queue, never past a byte budget.
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

// Every socket whose incoming bytes are forwarded sits in rx_socks; every
// socket bytes are forwarded to sits in tx_socks, which has no programs, so
// its own receive path stays untouched. Both maps are keyed by socket cookie.
//
// The parser is the gate: it cuts each message at the remaining budget and
// accounts the bytes. When there is nothing left to forward (budget spent,
// stop asked, no state) it returns an error, which makes the kernel's stream
// parser stop reading *without consuming* the message: those bytes stay in
// the TCP receive queue for the proxy. The verdict never returns SK_PASS:
// data passed up into a psock is lost when the socket leaves the map.
#include <linux/bpf.h>
#include <linux/errno.h>
#include <bpf/bpf_helpers.h>

#ifndef MAX_SOCKS
#define MAX_SOCKS 65536
#endif

// ctl is written by user space only: where a socket's bytes go and how many.
// Every count is absolute, in bytes handed to the verdict since the socket
// entered rx_socks (flow.moved).
struct ctl {
	__u64 peer;   // cookie of the destination socket in tx_socks
	__u64 limit;  // stop exactly here; 0 = no limit
	__u64 credit; // flow control: forward no further than this for now
	__u64 notify; // tell user space when moved crosses this
	__u32 stop;   // 1: forward nothing more
	__u32 gen;    // bumped by user space each time the socket enters rx_socks
};

// flow is written by the programs only.
struct flow {
	__u64 moved;      // bytes the parser handed to the verdict
	__u64 redirected; // bytes the verdict queued on the destination
	__u64 pending;    // length of the message between parser and verdict
	__u64 msgs;       // messages redirected
	__u32 stopped;    // ctl.gen of the parser's last refusal
	__u32 _pad;
};

// event tells user space that a socket's parser reached a boundary.
struct event {
	__u64 cookie;
	__u32 kind;
	__u32 _pad;
};

enum event_kind {
	EVENT_LIMIT = 1,   // the limit is reached exactly
	EVENT_STOPPED = 2, // the parser refused a byte and stopped
	EVENT_CREDIT = 3,  // half the credit is used: user space may extend it
};

// Counter indexes; the Go side names them the same.
enum counter {
	COUNTER_REDIRECT_MSGS,
	COUNTER_REDIRECT_BYTES,
	COUNTER_PARSER_STOPS,
	COUNTER_DROP_NO_STATE,
	COUNTER_DROP_NO_PEER,
	COUNTER_EVENTS_LOST,
	COUNTER_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, MAX_SOCKS);
	__type(key, __u64);
	__type(value, __u64);
} rx_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, MAX_SOCKS);
	__type(key, __u64);
	__type(value, __u64);
} tx_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SOCKS);
	__type(key, __u64);
	__type(value, struct ctl);
} ctls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SOCKS);
	__type(key, __u64);
	__type(value, struct flow);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);

	if (v)
		*v += n;
}

static __always_inline void notify(__u64 cookie, __u32 kind)
{
	struct event ev = { .cookie = cookie, .kind = kind };

	// A lost event (ring full) is recovered by user space's slow periodic
	// check; the counter shows it happened.
	if (bpf_ringbuf_output(&events, &ev, sizeof(ev), 0))
		count(COUNTER_EVENTS_LOST, 1);
}

// refuse stops the stream parser on this socket without consuming the
// message it was offered: the kernel turns the error into a parser abort,
// leaves the bytes in the TCP receive queue and marks the socket with
// ENOMSG. flow.stopped tells user space, authoritatively, which parser
// generation stopped (signals about it may arrive late).
static __always_inline int refuse(__u64 cookie, struct ctl *c, struct flow *f)
{
	if (c && f)
		f->stopped = c->gen;
	count(COUNTER_PARSER_STOPS, 1);
	notify(cookie, EVENT_STOPPED);
	return -ENOMSG;
}

SEC("sk_skb/stream_parser")
int splice_parser(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct ctl *c = bpf_map_lookup_elem(&ctls, &cookie);
	struct flow *f = bpf_map_lookup_elem(&flows, &cookie);
	__u64 len = skb->len, left, old;

	// Why refuse: a socket without state has nowhere to send its bytes.
	if (!c || !f)
		return refuse(cookie, c, f);
	// Why refuse: user space is taking the socket back.
	if (c->stop)
		return refuse(cookie, c, f);
	if (c->limit) {
		left = c->limit > f->moved ? c->limit - f->moved : 0;
		// Why refuse: the limit is reached; these bytes are the proxy's.
		if (!left)
			return refuse(cookie, c, f);
		// The only cut: the kernel shows the parser the whole skb, even
		// when the message starts inside it, so after a cut skb->len
		// overstates what is left; a cut is therefore always followed by
		// a refusal, never by another message.
		if (len > left)
			len = left;
	}
	// Why refuse: flow control. The destination is a window behind; the
	// bytes wait in this socket's receive queue and TCP pushes back on the
	// sender. Credit is soft: a whole skb may overshoot it, so messages end
	// on skb boundaries.
	if (f->moved >= c->credit)
		return refuse(cookie, c, f);
	old = f->moved;
	f->moved = old + len;
	f->pending = len;
	if (c->limit && f->moved == c->limit)
		notify(cookie, EVENT_LIMIT);
	if (old < c->notify && f->moved >= c->notify)
		notify(cookie, EVENT_CREDIT);
	return len;
}

SEC("sk_skb/stream_verdict")
int splice_verdict(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct ctl *c = bpf_map_lookup_elem(&ctls, &cookie);
	struct flow *f = bpf_map_lookup_elem(&flows, &cookie);
	__u64 peer;

	if (!c || !f) {
		count(COUNTER_DROP_NO_STATE, 1);
		// Why drop: state vanished between parser and verdict; never pass
		// (passed bytes are lost when the socket leaves the map anyway).
		return SK_DROP;
	}
	peer = c->peer;
	if (bpf_sk_redirect_hash(skb, &tx_socks, &peer, 0) != SK_PASS) {
		count(COUNTER_DROP_NO_PEER, 1);
		// Why drop: the destination left tx_socks (closed or reset).
		return SK_DROP;
	}
	f->redirected += f->pending;
	f->msgs++;
	count(COUNTER_REDIRECT_MSGS, 1);
	count(COUNTER_REDIRECT_BYTES, f->pending);
	f->pending = 0;
	// Why pass: with a redirect set, SK_PASS means "send to the peer".
	return SK_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Types the Go loader takes from bpf2go -type although no map holds them:
// an unused pointer makes clang emit each one's BTF, so Go never copies a
// value or an offset of this file by hand.
const struct event *unused_event __attribute__((unused));
const enum event_kind *unused_event_kind __attribute__((unused));
const enum counter *unused_counter __attribute__((unused));
