// Kernel memory a forwarder process holds: its files, sockets, pipes and epoll entries priced at their slab sizes, plus its namespace's socket buffers.

package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine-wide kernel counters (Slab in /proc/meminfo) move with every
// other process on the machine, by megabytes a second while tests run
// beside the bench: too much noise for a few kilobytes per pair. So the
// kernel share is accounted instead: each object the forwarder's
// descriptors pin is priced at its slab object size, read from
// /proc/slabinfo, and the socket buffers are read per socket through
// sock_diag (ss -tm) in the forwarder's namespace only.

// Fallback object sizes (bytes, x86-64, Linux 6.x) for caches that
// /proc/slabinfo does not list on a kernel that merges them.
var slabFallback = map[string]float64{
	"filp": 192, "dentry": 192, "TCP": 2368, "TCPv6": 2496, "sock_inode_cache": 832,
	"inode_cache": 624, "eventpoll_epi": 128,
}

// pipeInfoBytes is struct pipe_inode_info, a kmalloc-192 object.
const pipeInfoBytes = 192

// pipeBufferBytes is sizeof(struct pipe_buffer): a pipe's slot array is
// this times its pages, rounded up to a power of two by kmalloc.
const pipeBufferBytes = 40

// slabSizes reads the object size of every slab cache.
func slabSizes() map[string]float64 {
	sizes := map[string]float64{}
	for k, v := range slabFallback {
		sizes[k] = v
	}
	f, err := os.Open("/proc/slabinfo")
	if err != nil {
		return sizes
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[3], 64); err == nil {
			sizes[fields[0]] = v
		}
	}
	return sizes
}

// kernelObjects are what one process's descriptors pin in the kernel.
type kernelObjects struct {
	files, sockets, epollItems float64
	// pipes holds each distinct pipe's slot array size in bytes.
	pipes map[string]float64
}

// countKernelObjects walks pid's descriptors.
func countKernelObjects(pid int) kernelObjects {
	k := kernelObjects{pipes: map[string]float64{}}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return k
	}
	for _, ent := range ents {
		path := filepath.Join(dir, ent.Name())
		target, err := os.Readlink(path)
		if err != nil {
			continue
		}
		k.files++
		switch {
		case strings.HasPrefix(target, "socket:"):
			k.sockets++
		case strings.HasPrefix(target, "pipe:"):
			if _, seen := k.pipes[target]; !seen {
				k.pipes[target] = pipeSlots(path)
			}
		case target == "anon_inode:[eventpoll]":
			k.epollItems += epollItems(pid, ent.Name())
		}
	}
	return k
}

// pipeSlots is the size of a pipe's slot array: its capacity (read by
// opening the pipe through /proc, which does not disturb its contents) in
// pages times a slot, rounded up to kmalloc's power of two.
func pipeSlots(path string) float64 {
	size := 16 * 4096 // the default capacity
	if fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		if n, err := unix.FcntlInt(uintptr(fd), unix.F_GETPIPE_SZ, 0); err == nil {
			size = n
		}
		unix.Close(fd)
	}
	b := float64(size/os.Getpagesize()) * pipeBufferBytes
	p := 8.0
	for p < b {
		p *= 2
	}
	return p
}

// epollItems counts the descriptors an epoll instance watches.
func epollItems(pid int, fd string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd))
	if err != nil {
		return 0
	}
	return float64(strings.Count(string(b), "tfd:"))
}

// bytes prices the objects: every descriptor's struct file and dentry, a
// socket's TCP sock and socket inode, a pipe's inode, pipe_inode_info and
// slot array, and each epoll registration.
func (k kernelObjects) bytes(sizes map[string]float64) float64 {
	total := k.files*(sizes["filp"]+sizes["dentry"]) +
		k.sockets*(sizes["TCP"]+sizes["sock_inode_cache"]) +
		k.epollItems*sizes["eventpoll_epi"]
	for _, slots := range k.pipes {
		// Both ends share one inode and dentry; files counted them above.
		total += sizes["inode_cache"] + pipeInfoBytes + slots
	}
	return total
}

// socketBuffers sums the buffer memory of every TCP socket in h's
// namespace as sock_diag reports it (ss -tm skmem: receive and send
// allocations, forward allocation, queued writes, options, backlog).
func socketBuffers(ctx context.Context, h host) (float64, error) {
	out, err := h.Command(ctx, "ss", "-tmnaH").Output()
	if err != nil {
		return 0, fmt.Errorf("ss -tm: %w", err)
	}
	var total float64
	for _, line := range strings.Split(string(out), "\n") {
		i := strings.Index(line, "skmem:(")
		if i < 0 {
			continue
		}
		body, _, _ := strings.Cut(line[i+len("skmem:("):], ")")
		for _, kv := range strings.Split(body, ",") {
			for _, key := range []string{"r", "t", "f", "w", "o", "bl"} {
				if v, ok := strings.CutPrefix(kv, key); ok {
					if n, err := strconv.ParseFloat(v, 64); err == nil {
						total += n
					}
					break
				}
			}
		}
	}
	return total, nil
}
