/* spread.c: an sk_reuseport program that hands a listener's new connections to its workers' sockets in turn, or by the client's address (all of one client's connections to one socket), instead of by the kernel's hash of their addresses and ports. */
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* The most workers a master runs (config.MaxWorkers). */
#define MAX_WORKERS 256

/* The sockets of one listener, one per worker, at keys 0..workers-1. */
struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, MAX_WORKERS);
	__type(key, __u32);
	__type(value, __u64);
} sockets SEC(".maps");

/* How many sockets Go put in the map; 0 until it has. */
__u32 workers = 0;

/* The next connection's turn; every CPU adds to it atomically. */
__u32 turn = 0;

/* At key 0, non-zero: pick the socket by the client's (source) address, not in turn. A map, not a global, so that a master's next binary (execve) can take it over by its descriptor and flip it at a reload. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} by_client SEC(".maps");

/* One step of a multiplicative (Fibonacci) hash: 2^32 / golden ratio, odd. */
static __always_inline __u32 mix(__u32 h, __u32 word)
{
	return (h ^ word) * 0x9E3779B1u;
}

/* client_hash sets *h to a hash of the connection's source address (IPv4 or IPv6; not the port). It returns 0, or -1 where the address cannot be read. */
static __always_inline int client_hash(struct sk_reuseport_md *md, __u32 *h)
{
	__u32 addr[4];
	__u32 x;

	if (md->eth_protocol == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes_relative(md, offsetof(struct iphdr, saddr), addr, 4, BPF_HDR_START_NET) < 0)
			/* Why: the IPv4 header is not there to read; the caller lets the kernel's hash pick. */
			return -1;
		x = mix(0, addr[0]);
	} else if (md->eth_protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes_relative(md, offsetof(struct ipv6hdr, saddr), addr, 16, BPF_HDR_START_NET) < 0)
			/* Why: the IPv6 header is not there to read; the caller lets the kernel's hash pick. */
			return -1;
		x = mix(mix(mix(mix(0, addr[0]), addr[1]), addr[2]), addr[3]);
	} else {
		/* Why: neither IPv4 nor IPv6, so no address to hash; the caller lets the kernel's hash pick. */
		return -1;
	}
	/* The multiply carries low bits up, never down, and % n reads the low bits: finish as murmur3 does (fmix32), so every bit of the address reaches them. */
	x ^= x >> 16;
	x *= 0x85EBCA6Bu;
	x ^= x >> 13;
	x *= 0xC2B2AE35u;
	x ^= x >> 16;
	*h = x;
	/* Why: the hash is set. */
	return 0;
}

SEC("sk_reuseport")
int spread(struct sk_reuseport_md *md)
{
	__u32 n = workers;
	__u32 zero = 0;
	__u32 *mode;
	__u32 key;
	__u32 h;

	if (n == 0 || n > MAX_WORKERS)
		/* Why: no sockets known yet; the kernel's hash picks one, as without the program. */
		return SK_PASS;
	mode = bpf_map_lookup_elem(&by_client, &zero);
	if (mode && *mode) {
		if (client_hash(md, &h) < 0)
			/* Why: no source address to hash; never refuse a connection for it: the kernel's hash picks, as without the program. */
			return SK_PASS;
		key = h % n;
	} else {
		key = __sync_fetch_and_add(&turn, 1) % n;
	}
	if (bpf_sk_select_reuseport(md, &sockets, &key, 0) == 0)
		/* Why: the worker whose turn it is, or whose client this is, takes the connection. */
		return SK_PASS;
	/* Why: its socket is gone from the map (closed by a reload); never refuse a connection for it: the kernel's hash picks among the rest. */
	return SK_PASS;
}

char __license[] SEC("license") = "Dual MIT/GPL";
