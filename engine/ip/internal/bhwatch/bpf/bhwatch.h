/* bhwatch.h: the ABI between the bhwatch programs and their Go loader: per CPU, whether a segment may still be on its way from tc ingress to its socket. */
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#ifndef BHWATCH_H
#define BHWATCH_H

#include <linux/types.h>

/*
 * bhwatch_cpu is one CPU's slot of the per-CPU array: busy is set (to 1)
 * by the first segment tc ingress sees on that CPU (the next ones find it
 * set and leave it) and cleared at the end of the NET_RX softirq run that
 * carried it, which exits counts. A segment goes from tc ingress to its
 * socket within one such run (or one section with bottom halves disabled,
 * which a NET_RX run on that CPU can only follow): once busy is 0, or
 * exits moved, every segment that had passed tc on that CPU before has
 * reached its socket.
 */
struct bhwatch_cpu {
	__u64 busy;
	__u64 exits;
};

enum bhwatch_const {
	/* The kernel's NET_RX_SOFTIRQ, the vector softirq_exit reports. */
	BHWATCH_NET_RX_SOFTIRQ = 3,
};

#endif
