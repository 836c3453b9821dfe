/* splice.h: the ABI between the splice tc program and its Go loader: map keys and values, modes, flags, counters and events. */
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#ifndef SPLICE_H
#define SPLICE_H

#include <linux/types.h>

/* Tunable sizes; the Go loader overrides max_entries before loading. */
#ifndef SPLICE_MAX_DIRS
#define SPLICE_MAX_DIRS (2 * 16384)
#endif
#ifndef SPLICE_EVENT_BYTES
#define SPLICE_EVENT_BYTES (256 * 1024)
#endif
#ifndef SPLICE_KEPT_BYTES
#define SPLICE_KEPT_BYTES (8 * 1024 * 1024)
#endif
/* Payload bytes one kept record carries at most; a longer (GSO) segment takes several. */
#ifndef SPLICE_KEPT_CHUNK
#define SPLICE_KEPT_CHUNK 8192
#endif

/* splice_key.family values (the kernel's AF_INET, AF_INET6). */
enum splice_family {
	SPLICE_AF_INET = 2,
	SPLICE_AF_INET6 = 10,
};

/*
 * splice_key names one direction of a spliced pair: the 4-tuple of a packet
 * as it arrives at the forwarder. IPv4 addresses use the first 4 bytes of
 * saddr/daddr; the rest stays zero.
 */
struct splice_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__be16 sport;
	__be16 dport;
	__u8 family;
	__u8 pad[3];
};

/* Modes a direction is in; the values are engine.Mode's. */
enum splice_mode {
	SPLICE_MODE_FORWARD = 0, /* translate and forward */
	SPLICE_MODE_WATCH = 1,	 /* forward acks; data or FIN raises an event and is not forwarded */
	SPLICE_MODE_HOLD = 2,	 /* forward nothing (kept with SPLICE_F_KEEP): the control plane is computing the translation */
};

/* Per-direction translation options, set by the control plane. */
enum splice_opt {
	SPLICE_OPT_STRIP_TS = 1,   /* overwrite the timestamp option with NOPs */
	SPLICE_OPT_STRIP_SACK = 2, /* overwrite SACK blocks with NOPs */
	SPLICE_OPT_LIMIT = 4,	   /* forward no byte at or past limit_seq */
};

/*
 * Per-direction facts the program learns (the low byte: only ever set,
 * with atomic OR), and the keeping state the control plane sets: bits 8-29
 * count the segments the program kept (a compare-and-swap per kept segment,
 * so the control plane can tell when it has received all of them, and stop
 * or release the keeping in the same atomic step).
 */
enum splice_flag {
	SPLICE_F_FIN_SEEN = 1,	/* this direction forwarded its FIN */
	SPLICE_F_FIN_ACKED = 2, /* the other side acknowledged that FIN */
	SPLICE_F_TIME_WAIT = 4, /* both FINs acknowledged: the pair waits 2MSL */
	SPLICE_F_CLOSED = 8,	/* a reset ended the pair: forward nothing more */
	SPLICE_F_LIMIT_EV = 16, /* the limit event was reported */
	SPLICE_F_WATCH_EV = 32, /* the watch event was reported */
	SPLICE_F_WND_SEEN = 64, /* wnd_edge comes from an ACK this direction forwarded, no longer the control plane's seed */
	SPLICE_F_KEPT_ONE = 0x100,	   /* one kept segment in the count */
	SPLICE_F_KEPT_MASK = 0x3fffff00,   /* the count of kept segments, modulo 2^22 */
	SPLICE_F_PASS = 0x40000000,	   /* released: what would be kept goes to the stack (the forwarder's socket) */
	SPLICE_F_KEEP = 0x80000000,	   /* keep every segment, whatever the mode: the control plane is publishing */
};

/*
 * splice_dir is one direction of a pair: what to rewrite a packet into and
 * what the program has tracked. Slots 2n and 2n+1 of splice_dirs hold the
 * two directions of pair n, so a direction's peer is at slot ^ 1.
 * Sequence numbers are in the sender's (input) space unless said otherwise.
 * Layout: 104 bytes; the Go side reads and writes it through mmap.
 */
struct splice_dir {
	/* Rewrite target: the peer direction's key, source and destination swapped. */
	__u8 out_saddr[16];
	__u8 out_daddr[16];
	__be16 out_sport;
	__be16 out_dport;
	__u32 out_ifindex;
	__u32 seq_off; /* out.seq = in.seq + seq_off; the peer's acks subtract it */
	__u32 ts_off;  /* out.TSval = in.TSval + ts_off; the peer's TSecr subtract it */
	/* mode | opts << 8 | in_shift << 16 | out_shift << 24; one atomic store by the control plane */
	__u32 ctl;
	__u32 limit_seq; /* with SPLICE_OPT_LIMIT: first sequence number not to forward */
	__u32 flags;	 /* enum splice_flag */
	__u32 snd_nxt;	 /* highest seq + len (+1 for FIN) forwarded */
	__u32 ack_hi;	 /* highest ack forwarded (it acknowledges the peer's output space) */
	/*
	 * Right edge of the window this direction's sender offers the peer
	 * (ack + window << in_shift, in the peer's output space, as ack_hi):
	 * the peer's data may not start past it. Seeded by the control plane
	 * at ack_hi + (65535 << in_shift), the widest window the sender's
	 * scale can express; the first ACK forwarded replaces the seed
	 * (SPLICE_F_WND_SEEN), later ones only raise it.
	 */
	__u32 wnd_edge;
	__u32 ts_last;	 /* latest TSval seen, 0 if none */
	__u16 win;	 /* last raw (unscaled) window field forwarded */
	__u16 pad;
	__u32 last_seen; /* bpf_ktime_get_coarse_ns() >> 20 of the last forwarded packet */
	/*
	 * The largest window (win << in_shift, bytes) this direction's sender
	 * advertised: what bounds the peer's sequence numbers and this
	 * direction's old acks, as RFC 5961's MAX.SND.WND. Seeded with
	 * 65535 << in_shift and replaced by the first ACK, as wnd_edge;
	 * later ACKs only raise it.
	 */
	__u32 wnd_max;
	__u64 bytes;	 /* stream bytes forwarded: advances of snd_nxt, FIN excluded */
	__u64 packets;	 /* packets forwarded, retransmissions included */
};

/* Layout of splice_dir.ctl: four byte-wide fields at these bit positions. */
enum splice_ctl_layout {
	SPLICE_CTL_FIELD_MASK = 0xff,
	SPLICE_CTL_OPTS_POS = 8,
	SPLICE_CTL_IN_SHIFT_POS = 16,
	SPLICE_CTL_OUT_SHIFT_POS = 24,
};

#define SPLICE_CTL_MODE(c) ((c) & SPLICE_CTL_FIELD_MASK)
#define SPLICE_CTL_OPTS(c) (((c) >> SPLICE_CTL_OPTS_POS) & SPLICE_CTL_FIELD_MASK)
#define SPLICE_CTL_IN_SHIFT(c) (((c) >> SPLICE_CTL_IN_SHIFT_POS) & SPLICE_CTL_FIELD_MASK)
#define SPLICE_CTL_OUT_SHIFT(c) (((c) >> SPLICE_CTL_OUT_SHIFT_POS) & SPLICE_CTL_FIELD_MASK)

/* splice_dir.last_seen = bpf_ktime_get_coarse_ns() >> SPLICE_TIME_SHIFT. */
enum splice_time {
	SPLICE_TIME_SHIFT = 20,
};

/* Events reported to the control plane through the ring buffer. */
enum splice_event_kind {
	SPLICE_EV_FIN = 1,	 /* a direction forwarded its FIN; seq = the FIN's sequence number */
	SPLICE_EV_TIME_WAIT = 2, /* both FINs acknowledged; the pair entered TIME_WAIT */
	SPLICE_EV_RESET = 3,	 /* a reset was forwarded and closed the pair; seq = the RST's */
	SPLICE_EV_LIMIT = 4,	 /* the limit stopped forwarding; seq = snd_nxt, the first byte not forwarded */
	SPLICE_EV_WATCH = 5,	 /* data or FIN arrived in a watched direction; seq = its first byte */
};

struct splice_event {
	__u64 ktime;
	__u32 kind;
	__u32 seq;
	struct splice_key key; /* the direction the triggering packet travelled */
};

/*
 * splice_kept is one record of the kept ring buffer: a segment the program
 * kept for the control plane instead of forwarding or dropping it (while a
 * pair is held, or past a watched or limited direction's boundary), or one
 * SPLICE_KEPT_CHUNK-sized piece of a longer (GSO) one. Each record carries
 * the segment's TCP header as it arrived, so it can be delivered or
 * re-injected on its own; the segment's last record has last = 1.
 */
struct splice_kept {
	__u64 ktime;
	struct splice_key key; /* the direction the segment travelled */
	__u32 seq;	       /* sequence number of data[0] */
	__u32 len;	       /* bytes in data */
	__u8 hlen;	       /* bytes of hdr: the TCP header's length */
	__u8 last;	       /* the segment's last record: its FIN (if any) follows data */
	__u8 pad[2];
	__u8 hdr[60]; /* the TCP header as received (seq is the segment's first) */
	__u8 data[SPLICE_KEPT_CHUNK];
};

/* Counters, per CPU. Names in Go: counterNames. Drops carry the reason. */
enum splice_counter {
	SPLICE_CNT_FORWARDED = 0, /* packets translated and redirected */
	SPLICE_CNT_EVENT_LOST,	  /* events the full ring buffer refused */
	SPLICE_CNT_REOPENED,	  /* SYNs that reopened the tuple of a pair their sender is done with, handed to the stack */
	SPLICE_CNT_KEPT,	  /* segments kept for the control plane (held, or past a boundary) */
	SPLICE_CNT_PASSED,	  /* segments of a released direction handed to the stack (the rebuilt or thawed socket) */
	SPLICE_DROP_NO_ENTRY,	  /* a flow pointed at a slot with no entry */
	SPLICE_DROP_FRAGMENT,	  /* IPv4 or IPv6 first fragment of a spliced flow */
	SPLICE_DROP_MALFORMED,	  /* truncated or inconsistent IP/TCP header or options */
	SPLICE_DROP_CLOSED,	  /* the pair was reset */
	SPLICE_DROP_HOLD,	  /* held with neither keeping nor passing (a caller that does not keep) */
	SPLICE_DROP_SYN,	  /* SYN on a spliced 4-tuple */
	SPLICE_DROP_NO_ACK,	  /* neither ACK nor RST: invalid on a synchronized connection */
	SPLICE_DROP_SEQ,	  /* seq far from the tracked edge (blind injection), or data/FIN starting past the receiver's window */
	SPLICE_DROP_ACK,	  /* ack of data never sent, or far behind: blind injection */
	SPLICE_DROP_HOLD_DROPPED, /* a segment to keep that the full kept ring could not take */
	SPLICE_DROP_MTU,	  /* the packet (or a GSO segment) does not fit the peer device's MTU */
	SPLICE_DROP_REWRITE,	  /* a store or checksum helper failed */
	SPLICE_DROP_WRONG_DEVICE, /* a spliced flow's segment arrived on another device than the one toward its sender */
	SPLICE_DROP_STALE_FIN,	  /* a FIN behind the sender's next byte that is not its forwarded FIN again: blind teardown */
	SPLICE_DROP_EXT_HDR,	  /* IPv6 extension headers on a spliced flow's segment: not rewritten, and the stack must not see it */
	SPLICE_DROP_EXT_CHAIN,	  /* an IPv6 extension header chain longer than the program walks: its flow cannot be told */
	SPLICE_CNT_MAX,
};

#endif
