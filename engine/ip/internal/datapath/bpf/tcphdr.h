/* tcphdr.h: a TCP header copied to the stack: big-endian field access at verifier-bounded offsets, option parsing and the option rewrite. */
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#ifndef SPLICE_TCPHDR_H
#define SPLICE_TCPHDR_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "splice.h"

/*
 * The program copies the TCP header (20..60 bytes) into a buffer of HDR_BUF
 * bytes. Every byte offset is masked with HDR_BUF - 1, so the verifier can
 * bound each access; the option parser has already checked that each option
 * lies inside the header, so the mask never changes a valid offset.
 */
#define HDR_BUF 64
#define HDR_MASK (HDR_BUF - 1)

/* TCP header flag bits (byte 13 of the header). */
enum splice_tcp_flag {
	TCP_FIN = 0x01,
	TCP_SYN = 0x02,
	TCP_RST = 0x04,
	TCP_ACK = 0x10,
};

#define TCPOPT_EOL 0
#define TCPOPT_NOP 1
#define TCPOPT_SACK 5
#define TCPOPT_TIMESTAMP 8
#define TCPOLEN_TIMESTAMP 10

static __always_inline __u32 get32(const __u8 *b, __u32 off)
{
	return (__u32)b[off & HDR_MASK] << 24 | (__u32)b[(off + 1) & HDR_MASK] << 16 |
	       (__u32)b[(off + 2) & HDR_MASK] << 8 | (__u32)b[(off + 3) & HDR_MASK];
}

static __always_inline void put32(__u8 *b, __u32 off, __u32 v)
{
	b[off & HDR_MASK] = v >> 24;
	b[(off + 1) & HDR_MASK] = v >> 16;
	b[(off + 2) & HDR_MASK] = v >> 8;
	b[(off + 3) & HDR_MASK] = v;
}

static __always_inline __u16 get16(const __u8 *b, __u32 off)
{
	return (__u16)b[off & HDR_MASK] << 8 | b[(off + 1) & HDR_MASK];
}

static __always_inline void put16(__u8 *b, __u32 off, __u16 v)
{
	b[off & HDR_MASK] = v >> 8;
	b[(off + 1) & HDR_MASK] = v;
}

/* Where the options this program rewrites sit in the header; 0 = absent. */
struct tcpopts {
	__u8 ts;
	__u8 sack;
	__u8 sack_len;
};

/* The walk over the options, one bpf_loop step per option. */
struct optwalk {
	const __u8 *h;
	struct tcpopts *o;
	__u32 hlen;
	__u32 i;
	int err;
};

static long opt_step(__u64 n, void *ctx)
{
	struct optwalk *w = ctx;
	const __u8 *h = w->h;
	__u32 i = w->i;

	if (i >= w->hlen)
		return 1;
	__u8 kind = h[i & HDR_MASK];
	if (kind == TCPOPT_EOL)
		return 1;
	if (kind == TCPOPT_NOP) {
		w->i = i + 1;
		return 0;
	}
	__u32 len = i + 1 < w->hlen ? h[(i + 1) & HDR_MASK] : 0;
	if (len < 2 || i + len > w->hlen)
		goto bad;
	if (kind == TCPOPT_TIMESTAMP) {
		if (len != TCPOLEN_TIMESTAMP || w->o->ts)
			goto bad;
		w->o->ts = i;
	} else if (kind == TCPOPT_SACK) {
		if (len < 10 || len > 34 || (len - 2) % 8 || w->o->sack)
			goto bad;
		w->o->sack = i;
		w->o->sack_len = len;
	}
	w->i = i + len;
	return 0;
bad:
	w->err = -1;
	return 1;
}

/*
 * parse_opts finds the timestamp and SACK options. It returns -1 for
 * options that overrun the header, a timestamp option whose length is not
 * 10, a SACK option that is not 2 + 8n bytes with 1 <= n <= 4, or a second
 * timestamp or SACK option: a receiver could read any of those differently
 * from the translation. bpf_loop keeps the verifier from walking every
 * combination of up to 40 options.
 */
static __always_inline int parse_opts(const __u8 *h, __u32 hlen, struct tcpopts *o)
{
	struct optwalk w = {.h = h, .o = o, .hlen = hlen, .i = 20};

	/*
	 * The headers nearly every segment carries, no options or Linux's
	 * NOP, NOP, timestamp, are told at once: the walk below would find
	 * the same, one callback per option.
	 */
	if (hlen == 20)
		return 0;
	if (hlen == 32 && h[20] == TCPOPT_NOP && h[21] == TCPOPT_NOP && h[22] == TCPOPT_TIMESTAMP &&
	    h[23] == TCPOLEN_TIMESTAMP) {
		o->ts = 22;
		return 0;
	}

	if (bpf_loop(40, opt_step, &w, 0) < 0)
		return -1;
	return w.err;
}

/* nop_out overwrites n bytes at off with NOP options. */
static __always_inline void nop_out(__u8 *b, __u32 off, __u32 n)
{
	for (int i = 0; i < 34; i++) {
		if (i >= n)
			break;
		b[(off + i) & HDR_MASK] = TCPOPT_NOP;
	}
}

/*
 * rewrite_opts translates the timestamp and SACK options in b. SACK edges
 * and TSecr refer to the peer direction's output space, so they take the
 * peer's offsets; TSval is this sender's clock and takes ts_off.
 */
static __always_inline void rewrite_opts(__u8 *b, const struct tcpopts *o, __u8 opts, int has_ack,
					 __u32 ts_off, __u32 peer_ts_off, __u32 peer_seq_off)
{
	if (o->ts) {
		if (opts & SPLICE_OPT_STRIP_TS) {
			nop_out(b, o->ts, TCPOLEN_TIMESTAMP);
		} else {
			put32(b, o->ts + 2, get32(b, o->ts + 2) + ts_off);
			if (has_ack)
				put32(b, o->ts + 6, get32(b, o->ts + 6) - peer_ts_off);
		}
	}
	if (o->sack) {
		if (opts & SPLICE_OPT_STRIP_SACK) {
			nop_out(b, o->sack, o->sack_len);
		} else {
			for (int k = 0; k < 8; k++) {
				__u32 at = o->sack + 2 + 4 * k;
				if (at >= o->sack + o->sack_len)
					break;
				put32(b, at, get32(b, at) - peer_seq_off);
			}
		}
	}
}

#endif
