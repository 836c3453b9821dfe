/* splice.c: tc ingress program of engine ip: translates each packet of a spliced TCP connection into a packet of its peer connection and redirects it out of the peer's device. */
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "splice.h"
#include "tcphdr.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * Types the Go loader takes from bpf2go -type although no map holds them:
 * an unused pointer makes clang emit each one's BTF, so Go never copies a
 * value or an offset of splice.h by hand.
 */
const enum splice_mode *unused_splice_mode __attribute__((unused));
const enum splice_opt *unused_splice_opt __attribute__((unused));
const enum splice_flag *unused_splice_flag __attribute__((unused));
const enum splice_family *unused_splice_family __attribute__((unused));
const enum splice_ctl_layout *unused_splice_ctl_layout __attribute__((unused));
const enum splice_time *unused_splice_time __attribute__((unused));
const enum splice_tcp_flag *unused_splice_tcp_flag __attribute__((unused));
const enum splice_event_kind *unused_splice_event_kind __attribute__((unused));
const enum splice_counter *unused_splice_counter __attribute__((unused));
const struct splice_event *unused_splice_event __attribute__((unused));
const struct splice_kept *unused_splice_kept __attribute__((unused));

#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))
#define WRITE_ONCE(x, v) (*(volatile typeof(x) *)&(x) = (v))

/* 4-tuple -> slot in splice_dirs; two keys per pair. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct splice_key);
	__type(value, __u32);
	__uint(max_entries, SPLICE_MAX_DIRS);
} splice_flows SEC(".maps");

/* Directional entries, mmapped by the control plane for atomic mode changes and reads. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct splice_dir);
	__uint(max_entries, SPLICE_MAX_DIRS);
} splice_dirs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, SPLICE_CNT_MAX);
} splice_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SPLICE_EVENT_BYTES);
} splice_events SEC(".maps");

/* Segments kept for the control plane, as splice_kept records; apart from the events, so keeping cannot crowd them out. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SPLICE_KEPT_BYTES);
} splice_kept_ring SEC(".maps");

/* Where a kept record is built before bpf_ringbuf_output copies its used part: one per CPU (tc runs with bottom halves off). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct splice_kept);
	__uint(max_entries, 1);
} splice_kept_scratch SEC(".maps");

/*
 * What one CPU last learnt from helpers whose answers hold for a tick:
 * the clock, for stamp_now, and the frame lengths peer devices took, for
 * fits_mtu. Per CPU, so no other CPU writes its line.
 */
struct splice_clock {
	__u64 jiffies; /* bpf_jiffies64() when stamp was read */
	__u32 stamp;   /* bpf_ktime_get_coarse_ns() >> SPLICE_TIME_SHIFT */
	__u32 pad;
	/* Two devices (by the low bit of their index): within tick mtu_jiffies, bpf_check_mtu passed frames of mtu_len bytes out of mtu_ifindex. */
	__u64 mtu_jiffies[2];
	__u32 mtu_ifindex[2];
	__u32 mtu_len[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct splice_clock);
	__uint(max_entries, 1);
} splice_clock SEC(".maps");

/* Payload bytes per kept record, at most SPLICE_KEPT_CHUNK; tests lower it to exercise several records per segment. */
volatile const __u32 kept_chunk = SPLICE_KEPT_CHUNK;

static __always_inline void count(__u32 what)
{
	__u64 *v = bpf_map_lookup_elem(&splice_counters, &what);
	if (v)
		*v += 1;
}

static __always_inline int drop(__u32 why)
{
	count(why);
	return TC_ACT_SHOT;
}

static __always_inline void emit(const struct splice_key *k, __u32 kind, __u32 seq)
{
	struct splice_event *ev = bpf_ringbuf_reserve(&splice_events, sizeof(*ev), 0);
	if (!ev) {
		count(SPLICE_CNT_EVENT_LOST);
		return;
	}
	/* The fine clock: Go compares it with CLOCK_MONOTONIC to tell this
	 * splice's events from an earlier one's; events are rare. */
	ev->ktime = bpf_ktime_get_ns();
	ev->kind = kind;
	ev->seq = seq;
	__builtin_memcpy(&ev->key, k, sizeof(*k));
	bpf_ringbuf_submit(ev, 0);
}

/*
 * stamp_now is bpf_ktime_get_coarse_ns() >> SPLICE_TIME_SHIFT, the clock
 * of splice_dir.last_seen. The coarse clock only moves at a tick, when
 * jiffies does, and bpf_jiffies64 is a load the verifier inlines where the
 * clock is a helper call: the clock is read once per tick and CPU. A CPU
 * that reads it between a tick's jiffies and clock updates keeps the
 * previous tick's time until the next tick: a stamp at most one tick old,
 * where an idle timeout counts seconds.
 */
static __always_inline __u32 stamp_now(void)
{
	__u32 zero = 0;
	struct splice_clock *c = bpf_map_lookup_elem(&splice_clock, &zero);
	__u64 j = bpf_jiffies64();

	if (c && c->jiffies == j)
		return c->stamp;
	__u32 t = bpf_ktime_get_coarse_ns() >> SPLICE_TIME_SHIFT;
	if (c) {
		c->jiffies = j;
		c->stamp = t;
	}
	return t;
}

/* touch stamps a direction with the time its last packet went through, writing its line only when the stamp moves. */
static __always_inline void touch(struct splice_dir *e)
{
	__u32 t = stamp_now();

	if (READ_ONCE(e->last_seen) != t)
		WRITE_ONCE(e->last_seen, t);
}

/* seq_after reports whether a comes after b in sequence space (RFC 1982). */
static __always_inline int seq_after(__u32 a, __u32 b)
{
	return (__s32)(a - b) > 0;
}

/*
 * advance raises *p to v if v is after it, atomically against the other
 * CPUs that may handle the same direction, and stores the value it replaced
 * in *old. It returns 1 if it advanced.
 */
static __always_inline int advance(__u32 *p, __u32 v, __u32 *old)
{
	for (int i = 0; i < 4; i++) {
		__u32 cur = READ_ONCE(*p);
		if (!seq_after(v, cur))
			return 0;
		if (__sync_val_compare_and_swap(p, cur, v) == cur) {
			*old = cur;
			return 1;
		}
	}
	return 0;
}

/* grow sets *p to v if v is larger (a size, not a sequence number), atomically against the other CPUs. */
static __always_inline void grow(__u32 *p, __u32 v)
{
	for (int i = 0; i < 4; i++) {
		__u32 cur = READ_ONCE(*p);
		if (v <= cur || __sync_val_compare_and_swap(p, cur, v) == cur)
			return;
	}
}

/* win_span is how far a segment may legitimately lie from a tracked edge when windows use shift. */
static __always_inline __u32 win_span(__u32 shift)
{
	if (shift > 14)
		shift = 14;
	return 65536u << shift;
}

/*
 * Below this many bytes, a direction's largest advertised window does not
 * narrow the guards: 65535, the widest window without scaling, so a
 * connection that does not scale keeps the span it always had, and a
 * receiver that advertised only zero windows since the splice still lets
 * its sender's window probes (one byte behind its next) through.
 */
#define SPLICE_WND_FLOOR 65535u

/*
 * max_window is the largest window direction d's sender advertised
 * (wnd_max), at least SPLICE_WND_FLOOR: RFC 5961's MAX.SND.WND, which
 * bounds how far the other sender's segments may lie from its next byte,
 * and how far d's acks may lag behind its highest one.
 */
static __always_inline __u32 max_window(const struct splice_dir *d)
{
	__u32 w = READ_ONCE(d->wnd_max);

	return w > SPLICE_WND_FLOOR ? w : SPLICE_WND_FLOOR;
}

/*
 * seq_bound is how far the segment of direction e may lie from its
 * sender's next byte (snd_nxt), either way: the largest window the
 * receiver advertised (peer's), and never more than the widest window the
 * sender can have been given on its own connection (65536 << the peer's
 * out_shift), the span the check used alone before.
 */
static __always_inline __u32 seq_bound(const struct splice_dir *peer)
{
	__u32 span = win_span(SPLICE_CTL_OUT_SHIFT(READ_ONCE(peer->ctl)));
	__u32 w = max_window(peer);

	return w < span ? w : span;
}

/* rescale_window re-expresses a raw window of one connection in the other's scale, rounding down. */
static __always_inline __u16 rescale_window(__u16 w, __u32 in_shift, __u32 out_shift)
{
	if (in_shift > 14)
		in_shift = 14;
	if (out_shift > 14)
		out_shift = 14;
	__u64 bytes = ((__u64)w << in_shift) >> out_shift;
	return bytes > 0xffff ? 0xffff : bytes;
}

/* The parts of a packet the lookup needs. */
struct pkt {
	struct splice_key key;
	__u32 l4;  /* offset of the TCP header */
	__u32 end; /* offset just past the IP packet, trailing frame padding excluded */
	__u8 frag; /* an IPv4 or IPv6 first fragment */
	__u8 ext;  /* IPv6 extension headers precede the TCP header */
	__u8 has_th; /* th holds the TCP header's first 20 bytes, read with the IP header */
	__u16 ip_check; /* the IPv4 header checksum, as in the packet */
	__u8 th[20] __attribute__((aligned(4)));
};

/*
 * The frame's first 54 bytes, which one bpf_skb_load_bytes reads: the
 * Ethernet header and an IPv6 header, or an IPv4 header without options
 * and the TCP header's fixed part (every TCP segment has at least that).
 * Two bytes ahead of them align the IP header.
 */
struct head {
	__u8 pad[2];
	__u8 raw[ETH_HLEN + 40];
} __attribute__((aligned(8)));

/*
 * read_bytes copies n bytes (a constant, even) at off into dst, which is
 * 2-byte aligned: straight from the skb's linear data when they lie there
 * (a segment's headers nearly always do), else through
 * bpf_skb_load_bytes, a helper call that also reaches paged data.
 */
static __always_inline int read_bytes(struct __sk_buff *skb, __u32 off, void *dst, const __u32 n)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;

	if (off <= 255 && data + off + n <= end) {
		const __u16 *from = data + off;
		__u16 *to = dst;

		for (__u32 i = 0; i < n / 2; i++)
			to[i] = from[i];
		return 0;
	}
	return bpf_skb_load_bytes(skb, off, dst, n);
}

/*
 * IPv6 extension headers walked before the TCP header, at most: every
 * chain RFC 8200 section 4.1 allows (hop-by-hop, destination options,
 * routing, fragment, authentication, destination options again, then a
 * mobility, HIP or shim6 header) has fewer.
 */
#define SPLICE_V6_EXT_MAX 8

/* parse_ip's results besides 0. */
enum {
	PARSE_NOT_OURS = -1,  /* not TCP over IPv4/IPv6 with a readable port pair */
	PARSE_LONG_CHAIN = -2, /* IPv6 extension headers past SPLICE_V6_EXT_MAX: the port pair was not reached */
};

/*
 * walk_ext6 walks the IPv6 extension headers from nexthdr at offset *off
 * up to the TCP header, leaving *off there; it notes in p whether it
 * passed any and whether one was a first fragment. A later fragment
 * carries no TCP header, ESP hides it, and any other next header is not
 * TCP: PARSE_NOT_OURS.
 */
static __always_inline int walk_ext6(struct __sk_buff *skb, struct pkt *p, __u8 nexthdr, __u32 *off)
{
	for (int i = 0; i < SPLICE_V6_EXT_MAX; i++) {
		__u8 h[4]; /* next header, length, and a fragment header's offset and flags */
		__u32 hl;

		if (nexthdr == IPPROTO_TCP)
			return 0;
		if (bpf_skb_load_bytes(skb, *off, h, sizeof(h)) < 0)
			return PARSE_NOT_OURS;
		switch (nexthdr) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS:
		case 135: /* mobility */
		case 139: /* HIP */
		case 140: /* shim6 */
			hl = ((__u32)h[1] + 1) * 8;
			break;
		case IPPROTO_FRAGMENT:
			if (((h[2] << 8) | h[3]) & 0xfff8)
				return PARSE_NOT_OURS; /* a later fragment carries no TCP header to match */
			p->frag = 1;
			hl = 8;
			break;
		case IPPROTO_AH:
			hl = ((__u32)h[1] + 2) * 4;
			break;
		default:
			return PARSE_NOT_OURS; /* not TCP, or ESP: no port pair to read */
		}
		p->ext = 1;
		nexthdr = h[0];
		*off += hl;
	}
	return nexthdr == IPPROTO_TCP ? 0 : PARSE_LONG_CHAIN;
}

/*
 * parse_ip returns PARSE_NOT_OURS for anything that is not TCP over
 * IPv4/IPv6 with a readable port pair, PARSE_LONG_CHAIN for IPv6 whose
 * extension headers it did not walk to the end. Each bpf_skb_load_bytes
 * is a helper call on every packet the devices see, so the common frames
 * take one (IPv4 without options: the TCP header comes with it) or two
 * (IPv6: the TCP header's fixed part); only a frame too short for those
 * reads its headers piece by piece.
 */
static __always_inline int parse_ip(struct __sk_buff *skb, struct pkt *p)
{
	struct head h;
	struct ethhdr *eth = (struct ethhdr *)h.raw;
	__u32 len;

	if (read_bytes(skb, 0, h.raw, sizeof(h.raw)) < 0) {
		/* Shorter than 54 bytes: no IPv6 header fits, an IPv4 one may. */
		if (read_bytes(skb, 0, h.raw, ETH_HLEN + sizeof(struct iphdr)) < 0)
			return -1;
		if (eth->h_proto != bpf_htons(ETH_P_IP))
			return -1;
	} else if (eth->h_proto == bpf_htons(ETH_P_IP) && ((struct iphdr *)(h.raw + ETH_HLEN))->ihl == 5) {
		__builtin_memcpy(p->th, h.raw + ETH_HLEN + sizeof(struct iphdr), sizeof(p->th));
		p->has_th = 1;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (struct iphdr *)(h.raw + ETH_HLEN);

		if (ip->version != 4 || ip->ihl < 5 || ip->protocol != IPPROTO_TCP)
			return -1;
		__u16 frag = bpf_ntohs(ip->frag_off);
		if (frag & 0x1fff)
			return -1; /* a later fragment carries no TCP header to match */
		p->frag = (frag & 0x2000) != 0;
		p->l4 = ETH_HLEN + ip->ihl * 4;
		len = bpf_ntohs(ip->tot_len);
		if (len == 0 && skb->gso_size)
			len = skb->len - ETH_HLEN; /* BIG TCP: the length lives in the skb */
		p->end = ETH_HLEN + len;
		p->ip_check = ip->check;
		p->key.family = SPLICE_AF_INET;
		__builtin_memcpy(p->key.saddr, &ip->saddr, 4);
		__builtin_memcpy(p->key.daddr, &ip->daddr, 4);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (struct ipv6hdr *)(h.raw + ETH_HLEN);

		if (ip6->version != 6)
			return -1;
		__u32 l4 = ETH_HLEN + sizeof(*ip6);
		int rc = walk_ext6(skb, p, ip6->nexthdr, &l4);
		if (rc < 0)
			return rc;
		p->l4 = l4;
		len = bpf_ntohs(ip6->payload_len);
		if (len == 0 && skb->gso_size)
			len = skb->len - ETH_HLEN - sizeof(*ip6); /* BIG TCP: the length lives in the skb */
		p->end = ETH_HLEN + sizeof(*ip6) + len;
		p->key.family = SPLICE_AF_INET6;
		__builtin_memcpy(p->key.saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->key.daddr, &ip6->daddr, 16);
	} else {
		return -1;
	}

	if (!p->has_th) {
		if (read_bytes(skb, p->l4, p->th, sizeof(p->th)) == 0)
			p->has_th = 1;
		else if (read_bytes(skb, p->l4, p->th, 4) < 0)
			return -1; /* not even the port pair */
	}
	__builtin_memcpy(&p->key.sport, p->th, 2);
	__builtin_memcpy(&p->key.dport, p->th + 2, 2);
	return 0;
}

/* The TCP segment, parsed. */
struct seg {
	__u8 hdr[HDR_BUF]; /* the header as received; zero past hlen */
	/* The IPv4 header's checksum and addresses (struct ip4tail) at pre + 2, for one store with out. */
	__u8 pre[12];
	__u8 out[HDR_BUF]; /* the header as it will be sent */
	struct tcpopts o;
	__u32 hlen;
	__u32 len; /* payload bytes */
	__u32 seq;
	__u32 ack;
	__u32 tsval;
	__u16 win;
	__u8 flags;
};

/* parse_tcp returns -1 for a header that is truncated or inconsistent with the IP length. */
static __always_inline int parse_tcp(struct __sk_buff *skb, const struct pkt *p, struct seg *s)
{
	if (p->end > skb->len || p->end < p->l4 + 20)
		return -1;
	if (!p->has_th)
		return -1; /* shorter than a TCP header: parse_ip could read only the ports */
	__builtin_memcpy(s->hdr, p->th, 20);
	__u32 hlen = (s->hdr[12] >> 4) * 4;
	if (hlen < 20 || p->l4 + hlen > p->end)
		return -1;
	if (hlen == 32) {
		if (read_bytes(skb, p->l4 + 20, s->hdr + 20, 12) < 0)
			return -1; /* the common options' length (a timestamp), read without a helper */
	} else if (hlen > 20 && bpf_skb_load_bytes(skb, p->l4 + 20, s->hdr + 20, hlen - 20) < 0) {
		return -1;
	}
	if (parse_opts(s->hdr, hlen, &s->o) < 0)
		return -1;
	s->hlen = hlen;
	s->len = p->end - p->l4 - hlen;
	s->seq = get32(s->hdr, 4);
	s->ack = get32(s->hdr, 8);
	s->flags = s->hdr[13];
	s->win = get16(s->hdr, 14);
	if (s->o.ts)
		s->tsval = get32(s->hdr, s->o.ts + 2);
	return 0;
}

/* note_ts remembers the sender's latest timestamp: the control plane needs it to pick TsOff and to rebuild sockets. */
static __always_inline void note_ts(struct splice_dir *e, const struct seg *s)
{
	if (!s->o.ts)
		return;
	__u32 cur = READ_ONCE(e->ts_last);
	if (cur == 0 || seq_after(s->tsval, cur))
		WRITE_ONCE(e->ts_last, s->tsval);
}

/*
 * note_window records the right edge of the window the segment's sender
 * offers its peer: its ack plus its window, scaled by its own shift, in
 * the peer's output space. The first ACK after the control plane seeded
 * the edge (with the widest window the shift allows: it does not know the
 * latest one) replaces the seed; later ones only raise it, so a reordered
 * old ACK, or a forged in-window one with a zero window, cannot close the
 * window on the peer (a receiver shrinking its window is rare, and what
 * the sender sent into the old one was legitimate). Two CPUs racing on
 * the first ACK may leave the lower edge until the next ACK.
 */
static __always_inline void note_window(struct splice_dir *e, const struct seg *s, __u32 ctl)
{
	__u32 shift = SPLICE_CTL_IN_SHIFT(ctl);
	__u32 old;

	if (shift > 14)
		shift = 14;
	__u32 wnd = (__u32)s->win << shift;
	__u32 edge = s->ack + wnd;
	if (!(READ_ONCE(e->flags) & SPLICE_F_WND_SEEN) &&
	    !(__sync_fetch_and_or(&e->flags, SPLICE_F_WND_SEEN) & SPLICE_F_WND_SEEN)) {
		WRITE_ONCE(e->wnd_edge, edge);
		WRITE_ONCE(e->wnd_max, wnd);
		return;
	}
	advance(&e->wnd_edge, edge, &old);
	grow(&e->wnd_max, wnd);
}

/*
 * beyond_window reports whether data or a FIN starts past the right edge
 * of the receiver's window: its latest ack plus its advertised window
 * (the peer direction's wnd_edge), taken into the sender's space. A
 * segment starting exactly at the edge is not beyond it: a zero-window
 * probe carrying a byte starts there, and its receiver must answer it.
 */
static __always_inline int beyond_window(const struct seg *s, const struct splice_dir *e, const struct splice_dir *peer)
{
	__u32 edge = READ_ONCE(peer->wnd_edge) - READ_ONCE(e->seq_off);

	return seq_after(s->seq, edge);
}

/*
 * stale_fin reports whether the segment's FIN lies behind its sender's
 * next byte (nxt, snd_nxt as read): no sender sends data past its own
 * FIN, so a FIN there is forged, and recorded it would arm the teardown
 * (the next ACK of the whole stream would complete it). The FIN already
 * forwarded, sent again at nxt - 1, is not stale: its receiver may have
 * lost it.
 */
static __always_inline int stale_fin(const struct seg *s, const struct splice_dir *e, __u32 nxt)
{
	__u32 fin = s->seq + s->len;

	if (!seq_after(nxt, fin))
		return 0;
	return !((READ_ONCE(e->flags) & SPLICE_F_FIN_SEEN) && fin + 1 == nxt);
}

/*
 * fits_mtu checks the packet against the peer device's MTU; a GSO packet is
 * checked segment by segment. Routing itself happens in
 * bpf_redirect_neigh: bpf_fib_lookup would demand IP forwarding enabled on
 * the device, which a forwarder that only splices should not need.
 *
 * bpf_check_mtu is a helper call and a device lookup; its answer for a
 * frame that is not GSO only grows with the frame's length. A CPU
 * remembers, per tick, the longest such frame it let out of a device
 * (splice_clock), and passes shorter ones without asking again: an MTU
 * lowered meanwhile is seen by the next tick, and the frames in between
 * meet the device's own check.
 */
static __always_inline int fits_mtu(struct __sk_buff *skb, const struct splice_dir *e)
{
	__u32 zero = 0, mtu = 0;
	__u32 ifindex = e->out_ifindex;
	__u32 len = skb->len;
	int gso = skb->gso_size != 0;
	__u64 j = bpf_jiffies64();
	struct splice_clock *c = bpf_map_lookup_elem(&splice_clock, &zero);
	__u32 i = ifindex & 1;

	if (c && !gso && c->mtu_jiffies[i] == j && c->mtu_ifindex[i] == ifindex && len <= c->mtu_len[i])
		return 1;
	if (bpf_check_mtu(skb, ifindex, &mtu, 0, BPF_MTU_CHK_SEGS) != BPF_MTU_CHK_RET_SUCCESS)
		return 0;
	if (c && !gso) {
		if (c->mtu_jiffies[i] != j || c->mtu_ifindex[i] != ifindex) {
			c->mtu_jiffies[i] = j;
			c->mtu_ifindex[i] = ifindex;
			c->mtu_len[i] = len;
		} else if (len > c->mtu_len[i]) {
			c->mtu_len[i] = len;
		}
	}
	return 1;
}

/*
 * Ones' complement sums, as the kernel's csum_add and csum_fold: words are
 * taken as they lie in memory (the byte order cancels out of the sums),
 * so the program computes the differences bpf_csum_diff would, without a
 * helper call per difference.
 */
static __always_inline __u32 csum_add(__u32 a, __u32 b)
{
	__u32 r = a + b;

	return r + (r < a);
}

/* csum_fold64 folds a 64-bit sum of 32-bit words into a 32-bit ones' complement sum. */
static __always_inline __u32 csum_fold64(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	return s;
}

static __always_inline __u16 csum_fold(__u32 c)
{
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	return ~c;
}

/* csum_diff4 is bpf_csum_diff of n 32-bit words from -> to (n a constant or at most 15). */
static __always_inline __u32 csum_diff4(const __u32 *from, const __u32 *to, __u32 n)
{
	__u64 s = 0;

	for (int i = 0; i < 15; i++) {
		if (i >= n)
			break;
		s += (__u32)~from[i];
		s += to[i];
	}
	return csum_fold64(s);
}

/* The IPv4 header's checksum and addresses, which one bpf_skb_store_bytes rewrites. */
struct ip4tail {
	__u16 check;
	__u32 saddr;
	__u32 daddr;
} __attribute__((packed));

/*
 * rewrite writes the translated TCP header and addresses into the packet.
 * The TCP checksum is updated by difference through the kernel helper:
 * the header diff without BPF_F_PSEUDO_HDR, the address diff with it, so
 * a CHECKSUM_PARTIAL skb (GSO included) keeps only its pseudo-header sum
 * adjusted, and a CHECKSUM_COMPLETE skb keeps a valid skb->csum. The IPv4
 * header checksum, which no offload owns, the program updates itself and
 * writes with the addresses.
 */
static __always_inline int rewrite(struct __sk_buff *skb, const struct pkt *p, struct seg *s,
				   const struct splice_dir *e, const struct splice_dir *peer, __u32 ctl)
{
	__u32 csum_off = p->l4 + 16;
	__u32 hlen = s->hlen & 0x3c;

	__builtin_memcpy(s->out, s->hdr, HDR_BUF);
	__builtin_memcpy(s->out, &e->out_sport, 2);
	__builtin_memcpy(s->out + 2, &e->out_dport, 2);
	put32(s->out, 4, s->seq + e->seq_off);
	if (s->flags & TCP_ACK)
		put32(s->out, 8, s->ack - peer->seq_off);
	put16(s->out, 14, rescale_window(s->win, SPLICE_CTL_IN_SHIFT(ctl), SPLICE_CTL_OUT_SHIFT(ctl)));
	rewrite_opts(s->out, &s->o, SPLICE_CTL_OPTS(ctl), s->flags & TCP_ACK, e->ts_off, peer->ts_off,
		     peer->seq_off);

	if (hlen < 20)
		return -1;
	__u32 hdiff = csum_diff4((const __u32 *)s->hdr, (const __u32 *)s->out, hlen / 4);

	if (p->key.family == SPLICE_AF_INET) {
		struct ip4tail t;

		__builtin_memcpy(&t.saddr, e->out_saddr, 4);
		__builtin_memcpy(&t.daddr, e->out_daddr, 4);
		__u32 adiff = csum_diff4((const __u32 *)p->key.saddr, (const __u32 *)e->out_saddr, 1);
		adiff = csum_add(adiff, csum_diff4((const __u32 *)p->key.daddr, (const __u32 *)e->out_daddr, 1));
		/* As bpf_l3_csum_replace does with the difference: csum_replace_by_diff. */
		t.check = csum_fold(csum_add(adiff, ~(__u32)p->ip_check));
		if (p->l4 == ETH_HLEN + sizeof(struct iphdr)) {
			/* No IP options: the addresses end where the TCP header starts, one store for both. */
			__builtin_memcpy(s->pre + 2, &t, sizeof(t));
			if (bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, check), s->pre + 2, sizeof(t) + hlen, 0) < 0)
				return -1;
		} else if (bpf_skb_store_bytes(skb, p->l4, s->out, hlen, 0) < 0 ||
			   bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, check), &t, sizeof(t), 0) < 0) {
			return -1;
		}
		if (bpf_l4_csum_replace(skb, csum_off, 0, hdiff, 0) < 0)
			return -1;
		if (bpf_l4_csum_replace(skb, csum_off, 0, adiff, BPF_F_PSEUDO_HDR) < 0)
			return -1;
		return 0;
	}

	if (bpf_skb_store_bytes(skb, p->l4, s->out, hlen, 0) < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, csum_off, 0, hdiff, 0) < 0)
		return -1;

	__u32 adiff = csum_diff4((const __u32 *)p->key.saddr, (const __u32 *)e->out_saddr, 8);
	if (bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, saddr), e->out_saddr, 32, 0) < 0)
		return -1;
	/*
	 * BPF_F_IPV6 (Linux 6.16+) keeps skb->csum of a CHECKSUM_COMPLETE skb
	 * untouched, as IPv6 has no header checksum absorbing the address
	 * change. Older kernels refuse the flag; without it only that rare
	 * case is left with a stale skb->csum, which the receiver recomputes.
	 */
	long rc = bpf_l4_csum_replace(skb, csum_off, 0, adiff, BPF_F_PSEUDO_HDR | BPF_F_IPV6);
	if (rc == -22)
		rc = bpf_l4_csum_replace(skb, csum_off, 0, adiff, BPF_F_PSEUDO_HDR);
	return rc < 0 ? -1 : 0;
}

/* close_pair marks both directions closed after a reset and reports it once. */
static __always_inline void close_pair(struct splice_dir *e, struct splice_dir *peer, const struct splice_key *k,
				       __u32 seq)
{
	__u32 was = __sync_fetch_and_or(&e->flags, SPLICE_F_CLOSED);
	__sync_fetch_and_or(&peer->flags, SPLICE_F_CLOSED);
	if (!(was & SPLICE_F_CLOSED))
		emit(k, SPLICE_EV_RESET, seq);
}

/*
 * commit records what the forwarded segment changed: tracked edges,
 * counters, and the teardown state (SpliceNP 2.2). A FIN each way, each
 * acknowledged, puts the pair in TIME_WAIT; the Go sweeper removes it
 * after 2MSL. A reset that the receiver will accept closes the pair.
 */
static __always_inline void commit(struct splice_dir *e, struct splice_dir *peer, const struct pkt *p,
				   const struct seg *s, __u32 ctl)
{
	__u32 old;

	touch(e);
	if (READ_ONCE(e->win) != s->win)
		WRITE_ONCE(e->win, s->win);
	__sync_fetch_and_add(&e->packets, 1);
	note_ts(e, s);
	if (s->flags & TCP_ACK)
		advance(&e->ack_hi, s->ack, &old);

	if (s->flags & TCP_RST) {
		/*
		 * RFC 5961 3.2: the receiver resets only on a seq exactly at its
		 * next expected byte; any other in-window reset gets a challenge
		 * ACK (forwarded like any segment) and the pair lives on. A blind
		 * attacker must now guess the exact number, not a window. After
		 * its FIN, a reset at the FIN's own number closes too: Linux
		 * answers data that reaches a socket closed after its FIN with a
		 * reset numbered from that data's ack, often the FIN's, and the
		 * receiver, in CLOSE_WAIT or LAST_ACK, accepts it
		 * (tcp_reset_check); the pair would otherwise outlive both
		 * sockets. So does a reset at the receiver's last acknowledgement
		 * (ack_hi, in the sender's numbers): a sender whose socket is gone
		 * answers the receiver's challenge ACK with a reset numbered from
		 * its ack, and the receiver, still at that byte, takes it, though
		 * bytes forwarded and then lost on the way left snd_nxt ahead.
		 */
		__u32 nxt = READ_ONCE(e->snd_nxt);
		__u32 acked = READ_ONCE(peer->ack_hi) - e->seq_off;
		if (s->seq == nxt || s->seq == acked || ((READ_ONCE(e->flags) & SPLICE_F_FIN_SEEN) && s->seq == nxt - 1))
			close_pair(e, peer, &p->key, s->seq);
		return; /* a reset's window offers nothing */
	}
	if (s->flags & TCP_ACK)
		note_window(e, s, ctl);

	__u32 data_end = s->seq + s->len;
	__u32 fin = s->flags & TCP_FIN ? 1 : 0;
	/* Only data or FIN moves snd_nxt: a bare ACK's seq may lie past bytes a watch or limit did not forward. */
	if ((s->len || fin) && advance(&e->snd_nxt, data_end + fin, &old) && seq_after(data_end, old))
		__sync_fetch_and_add(&e->bytes, data_end - old);
	if (fin && !(__sync_fetch_and_or(&e->flags, SPLICE_F_FIN_SEEN) & SPLICE_F_FIN_SEEN))
		emit(&p->key, SPLICE_EV_FIN, data_end);

	if (s->flags & TCP_ACK) {
		__u32 pf = READ_ONCE(peer->flags);
		if ((pf & SPLICE_F_FIN_SEEN) && !(pf & SPLICE_F_FIN_ACKED) &&
		    s->ack == READ_ONCE(peer->snd_nxt) + peer->seq_off)
			pf = __sync_fetch_and_or(&peer->flags, SPLICE_F_FIN_ACKED) | SPLICE_F_FIN_ACKED;
		__u32 ef = READ_ONCE(e->flags);
		__u32 done = SPLICE_F_FIN_SEEN | SPLICE_F_FIN_ACKED;
		if ((ef & done) == done && (pf & done) == done && !(ef & SPLICE_F_TIME_WAIT)) {
			__u32 was = __sync_fetch_and_or(&e->flags, SPLICE_F_TIME_WAIT);
			__sync_fetch_and_or(&peer->flags, SPLICE_F_TIME_WAIT);
			if (!(was & SPLICE_F_TIME_WAIT))
				emit(&p->key, SPLICE_EV_TIME_WAIT, s->ack);
		}
	}

	if ((SPLICE_CTL_OPTS(ctl) & SPLICE_OPT_LIMIT) && READ_ONCE(e->snd_nxt) == READ_ONCE(e->limit_seq) &&
	    !(__sync_fetch_and_or(&e->flags, SPLICE_F_LIMIT_EV) & SPLICE_F_LIMIT_EV))
		emit(&p->key, SPLICE_EV_LIMIT, e->limit_seq);
}

/* The state a kept segment's records are built from, for the bpf_loop over its chunks. */
struct keepwalk {
	struct __sk_buff *skb;
	const struct pkt *p;
	const struct seg *s;
	__u32 off;  /* offset in the skb of the next chunk's first byte */
	__u32 left; /* payload bytes not yet kept */
	__u32 seq;  /* sequence number of the next chunk */
	__u64 now;
	int err;
};

/* keep_chunk writes one record of the segment: the next kept_chunk bytes of its payload (or none, for a bare segment). */
static long keep_chunk(__u64 i, void *ctx)
{
	struct keepwalk *w = ctx;
	__u32 zero = 0;
	struct splice_kept *k = bpf_map_lookup_elem(&splice_kept_scratch, &zero);

	if (!k) {
		w->err = 1;
		return 1;
	}
	__u32 n = w->left;
	__u32 chunk = kept_chunk;
	if (chunk == 0 || chunk > SPLICE_KEPT_CHUNK)
		chunk = SPLICE_KEPT_CHUNK;
	if (n > chunk)
		n = chunk;
	asm volatile("" : "+r"(n)); /* keep the clamp below visible to the verifier */
	if (n > SPLICE_KEPT_CHUNK)
		n = SPLICE_KEPT_CHUNK;
	if (n > 0 && bpf_skb_load_bytes(w->skb, w->off, k->data, n) < 0) {
		w->err = 1; /* unreadable: the segment is not kept whole */
		return 1;
	}
	k->ktime = w->now;
	__builtin_memcpy(&k->key, &w->p->key, sizeof(k->key));
	k->seq = w->seq;
	k->len = n;
	k->hlen = w->s->hlen;
	k->last = n == w->left;
	__builtin_memcpy(k->hdr, w->s->hdr, sizeof(k->hdr));
	if (bpf_ringbuf_output(&splice_kept_ring, k, offsetof(struct splice_kept, data) + n, 0) < 0) {
		w->err = 1; /* the ring is full */
		return 1;
	}
	w->off += n;
	w->seq += n;
	w->left -= n;
	return w->left == 0;
}

/* keep_records writes the segment into the kept ring: 0, or -1 if not all of it fits. */
static __always_inline int keep_records(struct __sk_buff *skb, const struct pkt *p, const struct seg *s)
{
	struct keepwalk w = {
		.skb = skb,
		.p = p,
		.s = s,
		.off = p->l4 + s->hlen,
		.left = s->len,
		.seq = s->seq,
		.now = bpf_ktime_get_ns(),
	};
	__u32 chunk = kept_chunk;
	if (chunk == 0 || chunk > SPLICE_KEPT_CHUNK)
		chunk = SPLICE_KEPT_CHUNK;
	__u32 n = s->len / chunk + 1; /* one more than needed: a bare segment takes one record, the walk stops at its last */
	if (bpf_loop(n, keep_chunk, &w, 0) < 0 || w.err || w.left)
		return -1;
	return 0;
}

/* KEEP_LOST: keep() did not take the segment (keeping stopped meanwhile); the caller forwards it. */
#define KEEP_LOST -100 /* no TC_ACT_* value (TC_ACT_UNSPEC is -1) */

/*
 * keep hands a segment to the control plane: counted in the direction's
 * flags by compare-and-swap (so the control plane knows how many records
 * to wait for, and stops or releases keeping atomically with the count),
 * then written into the kept ring. hold: keep only while SPLICE_F_KEEP is
 * set, else report KEEP_LOST. A released direction (SPLICE_F_PASS) hands
 * the segment to the stack instead: the forwarder's socket exists again
 * and every segment kept before is already in it.
 */
static __always_inline int keep(struct __sk_buff *skb, const struct pkt *p, const struct seg *s, struct splice_dir *e,
				int hold)
{
	__u32 w = 0;
	int i, won = 0;

	for (i = 0; i < 8; i++) {
		w = READ_ONCE(e->flags);
		if (w & SPLICE_F_PASS) {
			count(SPLICE_CNT_PASSED);
			return TC_ACT_UNSPEC; /* released: the forwarder's socket takes it, after everything kept before */
		}
		if (hold && !(w & SPLICE_F_KEEP))
			return KEEP_LOST;
		__u32 nw = (w & ~SPLICE_F_KEPT_MASK) | ((w + SPLICE_F_KEPT_ONE) & SPLICE_F_KEPT_MASK);
		if (__sync_val_compare_and_swap(&e->flags, w, nw) == w) {
			won = 1;
			break;
		}
	}
	if (!won)
		return drop(SPLICE_DROP_HOLD_DROPPED); /* eight CPUs raced for the count: lost like a full ring, the sender retransmits */
	if (keep_records(skb, p, s) < 0) {
		/* Take the segment out of the count again, so the control plane waits for no record of it. */
		for (i = 0; i < 32; i++) {
			w = READ_ONCE(e->flags);
			__u32 nw = (w & ~SPLICE_F_KEPT_MASK) | ((w - SPLICE_F_KEPT_ONE) & SPLICE_F_KEPT_MASK);
			if (__sync_val_compare_and_swap(&e->flags, w, nw) == w)
				break;
		}
		return drop(SPLICE_DROP_HOLD_DROPPED); /* the kept ring is full: the bound on what transitions keep; the sender retransmits */
	}
	count(SPLICE_CNT_KEPT);
	/*
	 * The control plane has it (delivered after publishing, or put in the
	 * rebuilt socket): the skb itself ends here. tcx knows no "stolen"
	 * (TC_ACT_STOLEN would mean "next": up the stack), so it is a SHOT
	 * the kernel counts as a drop, and this program as kept.
	 */
	return TC_ACT_SHOT;
}

/*
 * track_kept records what a segment kept past a boundary says about its
 * sender (its ack, window and clock), as commit does for forwarded ones:
 * the receiver's acknowledgment is real even if its data waits, and
 * unsplicing waits for exactly that.
 */
static __always_inline void track_kept(struct splice_dir *e, const struct seg *s, __u32 ctl)
{
	__u32 old;

	touch(e);
	if (READ_ONCE(e->win) != s->win)
		WRITE_ONCE(e->win, s->win);
	note_ts(e, s);
	if (s->flags & TCP_ACK) {
		advance(&e->ack_hi, s->ack, &old);
		note_window(e, s, ctl);
	}
}

/*
 * sender_done reports whether the sender of a direction (its flags; the
 * other direction's in peer) is done with the spliced connection: the
 * pair ended (both FINs acknowledged, or reset), or both sides sent their
 * FIN and the sender's was acknowledged. Such a sender is in TIME_WAIT or
 * its socket is gone; the kernel lets no new socket take the 4-tuple while
 * the old one is synchronized, so a bare SYN from it is a new connection.
 * The pair may never see its own end: the sender's last ACK of the other
 * side's FIN lost or dropped before the program saw it; the sender's side
 * sits out its TIME_WAIT all the same and takes the port again. A sender
 * whose FIN was acknowledged while the other side still sends is in
 * FIN_WAIT_2, still receiving: a SYN on its tuple is not its own, and
 * taking it would cut the stream it is still reading.
 */
static __always_inline int sender_done(__u32 flags, __u32 peer)
{
	__u32 done = SPLICE_F_FIN_SEEN | SPLICE_F_FIN_ACKED;

	return (flags & (SPLICE_F_TIME_WAIT | SPLICE_F_CLOSED)) ||
	       ((flags & done) == done && (peer & SPLICE_F_FIN_SEEN));
}

/* reopen hands a SYN on the tuple of a pair its sender is done with
 * (sender_done) to the stack, as a TIME_WAIT socket accepts a new SYN (RFC
 * 6191): a client whose ephemeral ports wrap reuses them while the pair
 * waits out 2MSL, and dropping its SYN would stall it for retransmissions.
 * The flow leaves the table so the handshake's next segments reach the
 * listener too; the pair itself waits for the control plane's sweep (or
 * the new connection's splice supersedes it), and the peer's direction
 * still translates a retransmitted FIN. */
static __always_inline int reopen(const struct pkt *p)
{
	bpf_map_delete_elem(&splice_flows, &p->key);
	count(SPLICE_CNT_REOPENED);
	return TC_ACT_UNSPEC; /* a new connection: the stack's (the listener's) */
}

/*
 * answer_synack answers the server's retransmitted SYN-ACK on a spliced
 * flow as the forwarder's socket would have: with the ACK that completes
 * the server's handshake. The socket's own ACK was lost and the socket
 * was frozen for the splice before the retransmission came; dropped, the
 * SYN-ACK would leave the server in SYN-RECEIVED, the connection never
 * accepted, until the client sends (a server that speaks first: never).
 * The segment is turned around in place: MACs, addresses and ports
 * swapped (no checksum changes with a swap), seq the client side's next in
 * the server's space, ack the SYN's + 1, ACK alone, the window the client
 * offers, options overwritten with NOPs; it goes back out the device it
 * came in on and is counted as forwarded.
 */
static __always_inline int answer_synack(struct __sk_buff *skb, const struct pkt *p, struct seg *s,
					 const struct splice_dir *e, const struct splice_dir *peer)
{
	__u32 hlen = s->hlen & 0x3c;
	__u32 ack = s->seq + 1;
	__u32 edge = READ_ONCE(peer->wnd_edge) - READ_ONCE(e->seq_off);
	__u32 shift = SPLICE_CTL_OUT_SHIFT(READ_ONCE(peer->ctl));
	__u32 wnd = seq_after(edge, ack) ? (edge - ack) >> (shift > 14 ? 14 : shift) : 0;
	__u8 mac[2 * ETH_ALEN];

	asm volatile("" : "+r"(hlen)); /* keep the check below: the verifier cannot see parse_tcp's bound */
	if (hlen < 20)
		return drop(SPLICE_DROP_MALFORMED); /* parse_tcp let it through: never, kept as the verifier's bound */
	__builtin_memcpy(s->out, s->hdr, HDR_BUF);
	__builtin_memcpy(s->out, s->hdr + 2, 2);
	__builtin_memcpy(s->out + 2, s->hdr, 2);
	put32(s->out, 4, READ_ONCE(peer->snd_nxt) + READ_ONCE(peer->seq_off));
	put32(s->out, 8, ack);
	s->out[13] = TCP_ACK;
	put16(s->out, 14, wnd > 0xffff ? 0xffff : wnd);
	for (__u32 i = 20; i < HDR_BUF; i++)
		s->out[i] = TCPOPT_NOP; /* past hlen too: only hlen bytes are stored */

	__s64 hdiff = bpf_csum_diff((__be32 *)s->hdr, hlen, (__be32 *)s->out, hlen, 0);
	if (hdiff < 0 || bpf_skb_store_bytes(skb, p->l4, s->out, hlen, 0) < 0 ||
	    bpf_l4_csum_replace(skb, p->l4 + 16, 0, hdiff, 0) < 0)
		return drop(SPLICE_DROP_REWRITE); /* half-rewritten: it must not reach the server */
	if (p->key.family == SPLICE_AF_INET) {
		if (bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, saddr), p->key.daddr, 4, 0) < 0 ||
		    bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, daddr), p->key.saddr, 4, 0) < 0)
			return drop(SPLICE_DROP_REWRITE); /* half-rewritten: it must not reach the server */
	} else if (bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, saddr), p->key.daddr, 16, 0) < 0 ||
		   bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, daddr), p->key.saddr, 16, 0) < 0) {
		return drop(SPLICE_DROP_REWRITE); /* half-rewritten: it must not reach the server */
	}
	if (bpf_skb_load_bytes(skb, 0, mac, sizeof(mac)) < 0 || bpf_skb_store_bytes(skb, 0, mac + ETH_ALEN, ETH_ALEN, 0) < 0 ||
	    bpf_skb_store_bytes(skb, ETH_ALEN, mac, ETH_ALEN, 0) < 0)
		return drop(SPLICE_DROP_REWRITE); /* half-rewritten: it must not reach the server */
	count(SPLICE_CNT_FORWARDED);
	return bpf_redirect(skb->ingress_ifindex, 0); /* back to the server, through the device it came from */
}

/*
 * splice checks, translates and redirects one segment of a spliced flow,
 * or keeps it for the control plane: every segment while the pair is
 * being published (held, or SPLICE_F_KEEP), and data past a watched or
 * limited direction's boundary.
 */
static __always_inline int splice(struct __sk_buff *skb, struct pkt *p, struct splice_dir *e,
				  struct splice_dir *peer)
{
	struct seg s = {};

	if (p->frag)
		return drop(SPLICE_DROP_FRAGMENT); /* a fragmented segment cannot be rewritten whole; TCP sets DF */
	/*
	 * Extension headers are not rewritten (a routing header even changes
	 * the checksum's destination), and passed up, the segment would reach
	 * the forwarder's frozen socket past every guard below.
	 */
	if (p->ext)
		return drop(SPLICE_DROP_EXT_HDR); /* a spliced flow's segment the program does not translate: its TCP never carries them */
	if (parse_tcp(skb, p, &s) < 0)
		return drop(SPLICE_DROP_MALFORMED); /* a receiver might read it differently from our translation */

	/*
	 * flags before ctl: the control plane writes a mode before it stops
	 * (or releases) the keeping, so a run that sees the keeping over
	 * also sees the mode that goes with it; one that still sees it
	 * keeps, and its compare-and-swap on the count tells it otherwise.
	 */
	__u32 flags = READ_ONCE(e->flags);
	__u32 ctl = READ_ONCE(e->ctl);

	if ((s.flags & (TCP_SYN | TCP_ACK)) == TCP_SYN && sender_done(flags, READ_ONCE(peer->flags)))
		return reopen(p); /* its sender's connection is over: a new one, the listener's */
	if (flags & SPLICE_F_CLOSED)
		return drop(SPLICE_DROP_CLOSED); /* a reset ended the pair: nobody is left to receive this */
	if ((s.flags & (TCP_SYN | TCP_ACK | TCP_RST | TCP_FIN)) == (TCP_SYN | TCP_ACK) && s.len == 0 &&
	    s.seq + 1 == READ_ONCE(e->snd_nxt))
		return answer_synack(skb, p, &s, e, peer); /* the server's handshake, retransmitted: answered, not forwarded */
	if (s.flags & TCP_SYN)
		return drop(SPLICE_DROP_SYN); /* a new handshake on a spliced tuple would desynchronize both ends */
	if (!(s.flags & (TCP_ACK | TCP_RST)))
		return drop(SPLICE_DROP_NO_ACK); /* RFC 9293 3.10.7.4: a synchronized receiver drops it anyway */

	if (SPLICE_CTL_MODE(ctl) == SPLICE_MODE_HOLD || (flags & SPLICE_F_KEEP)) {
		__u32 hnxt = READ_ONCE(e->snd_nxt);
		__s32 hd = s.seq - hnxt;
		__u32 hspan = seq_bound(peer);
		if (hd <= (__s32)hspan && hd >= -(__s32)hspan)
			note_ts(e, &s);
		int v = keep(skb, p, &s, e, 1);
		if (v != KEEP_LOST)
			return v;
		/* Keeping stopped after this run read the mode: the pair is published, read it again. */
		ctl = READ_ONCE(e->ctl);
		if (SPLICE_CTL_MODE(ctl) == SPLICE_MODE_HOLD)
			return drop(SPLICE_DROP_HOLD); /* held by a caller that keeps nothing: offsets may be half-written, the sender retransmits */
	}

	__u32 mode = SPLICE_CTL_MODE(ctl);
	__u32 nxt = READ_ONCE(e->snd_nxt);
	__u32 span = seq_bound(peer);
	__s32 dseq = s.seq - nxt;

	/*
	 * Bounded by the largest window the receiver advertised, not the
	 * widest its scale could express: a blind attacker has that many
	 * numbers to cover, not up to 2^30.
	 */
	if (dseq > (__s32)span || dseq < -(__s32)span)
		return drop(SPLICE_DROP_SEQ); /* farther from the sender's next byte than the receiver's largest window: blind injection */
	if (s.flags & TCP_ACK) {
		__u32 sent = READ_ONCE(peer->snd_nxt) + peer->seq_off;
		__s32 dack = s.ack - sent;
		/*
		 * The lag behind what was sent may reach the sender's own window
		 * (in_shift) or, while the control plane drains owed bytes, the
		 * other connection's (out_shift): the larger span. Behind the
		 * highest ack already seen, no ack lags more than the largest
		 * window the sender advertised (RFC 5961 section 5.2).
		 */
		__u32 ashift = SPLICE_CTL_IN_SHIFT(ctl) > SPLICE_CTL_OUT_SHIFT(ctl) ? SPLICE_CTL_IN_SHIFT(ctl) : SPLICE_CTL_OUT_SHIFT(ctl);
		if (dack > 0 || dack < -(__s32)win_span(ashift))
			return drop(SPLICE_DROP_ACK); /* acks data never sent, or lags more than a window: blind injection */
		if (seq_after(READ_ONCE(e->ack_hi) - max_window(e), s.ack))
			return drop(SPLICE_DROP_ACK); /* older than the highest ack by more than the sender's largest window: blind injection */
	}

	int carries = s.len > 0 || (s.flags & TCP_FIN);
	/*
	 * Data or a FIN starting past the receiver's window is dropped, before
	 * it can move snd_nxt, the byte count, FIN_SEEN, or raise a watch or
	 * limit event. Not passed on untracked: a receiver that takes it after
	 * all (its window grew in an ACK still on its way here) would
	 * acknowledge past snd_nxt, and the ack guard would then drop every
	 * later ACK of that receiver for good. Dropped, it costs what the
	 * receiver itself would do with it, a retransmission: the sender resends
	 * from its snd_una, within the window, and the receiver's answer moves
	 * the edge. Out-of-window segments were always dropped here (blind
	 * injection, above); this bounds them by the window, not by a span.
	 */
	if (carries && !(s.flags & TCP_RST) && beyond_window(&s, e, peer))
		return drop(SPLICE_DROP_SEQ); /* past the receiver's window: it would not take it either; forged or a broken sender */
	if ((s.flags & (TCP_FIN | TCP_RST)) == TCP_FIN && stale_fin(&s, e, nxt))
		return drop(SPLICE_DROP_STALE_FIN); /* a FIN before bytes its sender already sent: forged, it would arm teardown */
	if (carries && !(s.flags & TCP_RST)) {
		/* A retransmission of bytes already forwarded passes a watch: the receiver's ack of them is what unsplicing waits for. */
		int fresh = seq_after(s.seq + s.len + ((s.flags & TCP_FIN) ? 1 : 0), nxt);
		if (mode == SPLICE_MODE_WATCH && fresh) {
			if (!(__sync_fetch_and_or(&e->flags, SPLICE_F_WATCH_EV) & SPLICE_F_WATCH_EV))
				emit(&p->key, SPLICE_EV_WATCH, s.seq);
			int v = keep(skb, p, &s, e, 0);
			if (v == TC_ACT_SHOT)
				track_kept(e, &s, ctl); /* kept, or lost to a full ring: what it says of its sender holds either way */
			return v; /* the control plane takes this data into the rebuilt socket */
		}
		if (SPLICE_CTL_OPTS(ctl) & SPLICE_OPT_LIMIT) {
			__u32 limit = READ_ONCE(e->limit_seq);
			if (seq_after(s.seq + s.len + ((s.flags & TCP_FIN) ? 1 : 0), limit)) {
				if (!seq_after(s.seq, nxt) &&
				    !(__sync_fetch_and_or(&e->flags, SPLICE_F_LIMIT_EV) & SPLICE_F_LIMIT_EV))
					emit(&p->key, SPLICE_EV_LIMIT, nxt);
				int v = keep(skb, p, &s, e, 0);
				if (v == TC_ACT_SHOT)
					track_kept(e, &s, ctl); /* kept, or lost to a full ring: what it says of its sender holds either way */
				return v; /* bytes past the limit belong to the control plane: kept for the rebuilt socket */
			}
		}
	}

	if (!fits_mtu(skb, e))
		return drop(SPLICE_DROP_MTU); /* the peer device would drop it; the MSS clamp should have prevented it */
	if (rewrite(skb, p, &s, e, peer, ctl) < 0)
		return drop(SPLICE_DROP_REWRITE); /* half-rewritten: sending it would corrupt the peer connection */
	commit(e, peer, p, &s, ctl);
	count(SPLICE_CNT_FORWARDED);
	/*
	 * Out of the peer's device, never up our own stack: the rewritten
	 * source is local, a martian there. The kernel routes toward the new
	 * destination through that device and resolves L2; if it finds no
	 * route it drops the packet and counts it in the device's tx_dropped.
	 */
	return bpf_redirect_neigh(e->out_ifindex, 0, 0, 0);
}

/*
 * from_sender_device reports whether the segment came in on the device
 * toward its sender: the device the peer direction's packets leave
 * through (the pair was spliced with one device toward each peer). A
 * segment with a spliced pair's 4-tuple arriving on any other device did
 * not come from that peer: someone who can put frames on another link
 * (another tenant, another VLAN, a host on the server's side) forges it.
 * It is dropped, not handed to the stack: there the forwarder's frozen
 * socket would take it (moving the state that unsplicing and the drain
 * read) or, the socket closed, the listener would answer it with a reset
 * at a seq of the forger's choosing, toward the real peer.
 */
static __always_inline int from_sender_device(const struct __sk_buff *skb, const struct splice_dir *peer)
{
	return skb->ingress_ifindex == READ_ONCE(peer->out_ifindex);
}

SEC("tc")
int splice_ingress(struct __sk_buff *skb)
{
	struct pkt p = {};
	int rc = parse_ip(skb, &p);

	if (rc == PARSE_LONG_CHAIN)
		return drop(SPLICE_DROP_EXT_CHAIN); /* its flow cannot be told: passed up, a spliced one would reach the frozen socket */
	if (rc < 0)
		return TC_ACT_UNSPEC; /* not TCP over IPv4/IPv6 with ports: never spliced, let the next program decide */
	__u32 *slot = bpf_map_lookup_elem(&splice_flows, &p.key);
	if (!slot)
		return TC_ACT_UNSPEC; /* not spliced: the next program or the local stack owns it */
	__u32 si = *slot;
	__u32 pi = si ^ 1;
	struct splice_dir *e = bpf_map_lookup_elem(&splice_dirs, &si);
	struct splice_dir *peer = bpf_map_lookup_elem(&splice_dirs, &pi);
	if (!e || !peer)
		return drop(SPLICE_DROP_NO_ENTRY); /* a control-plane bug: the flow points past the table */
	if (!from_sender_device(skb, peer))
		return drop(SPLICE_DROP_WRONG_DEVICE); /* spoofed or misrouted: neither translated nor handed to the stack (see from_sender_device) */
	return splice(skb, &p, e, peer);
}
