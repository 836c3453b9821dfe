// A bounded pool of kernel pipes, so pairs do not pay two pipe() calls and an fcntl per splice.

package pipe

import (
	"sync"

	"golang.org/x/sys/unix"
)

type kpipe struct {
	r, w int
	size int
}

// pool keeps at most max idle pipes; a pipe that may hold bytes is never
// pooled, it is closed.
type pool struct {
	size int
	max  int
	mu   sync.Mutex
	idle []*kpipe
}

func newPool(size, max int) *pool { return &pool{size: size, max: max} }

func (p *pool) get() (*kpipe, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		k := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return k, nil
	}
	p.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	k := &kpipe{r: fds[0], w: fds[1], size: 64 << 10}
	// A larger pipe moves more per wakeup; the kernel may refuse past
	// /proc/sys/fs/pipe-max-size, in which case the default 64 KiB stays.
	if got, err := unix.FcntlInt(uintptr(k.w), unix.F_SETPIPE_SZ, p.size); err == nil {
		k.size = got
	}
	return k, nil
}

// release returns k to the pool when it is known empty, else closes it.
func (p *pool) release(k *kpipe, empty bool) {
	if empty {
		p.put(k)
		return
	}
	k.close()
}

func (p *pool) put(k *kpipe) {
	p.mu.Lock()
	if len(p.idle) < p.max {
		p.idle = append(p.idle, k)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	k.close()
}

func (p *pool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, k := range idle {
		k.close()
	}
}

func (k *kpipe) close() {
	unix.Close(k.r)
	unix.Close(k.w)
}
