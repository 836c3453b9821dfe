/* spread.c: an sk_reuseport program that hands a listener's new connections to its workers' sockets in turn, instead of by the hash of their addresses. */
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */

#include <linux/bpf.h>
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

SEC("sk_reuseport")
int spread(struct sk_reuseport_md *md)
{
	__u32 n = workers;
	__u32 key;

	if (n == 0 || n > MAX_WORKERS)
		/* Why: no sockets known yet; the kernel's hash picks one, as without the program. */
		return SK_PASS;
	key = __sync_fetch_and_add(&turn, 1) % n;
	if (bpf_sk_select_reuseport(md, &sockets, &key, 0) == 0)
		/* Why: the worker whose turn it is takes the connection. */
		return SK_PASS;
	/* Why: its socket is gone from the map (closed by a reload); never refuse a connection for it: the kernel's hash picks among the rest. */
	return SK_PASS;
}

char __license[] SEC("license") = "Dual MIT/GPL";
