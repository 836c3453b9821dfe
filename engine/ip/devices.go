// The devices the program is attached to, and the grace periods that tell when what passed it before a change has been delivered: the softirq watch's marker on each device, or a visit to every CPU.

package ip

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/engine/ip/internal/bhwatch"
	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// devices are the devices of the home namespace the program runs on, and
// the grace periods, which the softirq watch (internal/bhwatch) ends with
// a map read once its marker is first on every one of them.
type devices struct {
	// mu guards attached: the indexes of the devices the program (and
	// the softirq watch's marker) is attached to.
	mu       sync.Mutex
	attached map[int]bool
	// graces runs the grace periods: Quick is quickGrace once the watch
	// loads, else each visits every CPU.
	graces tcprepair.Graces
	// bh tells when every CPU has delivered the segments that passed tc
	// before a pair was inserted, for the grace periods (quickGrace);
	// set by the load, nil where it cannot load. bhOff: a device lacks
	// its marker.
	bh    *bhwatch.Watcher
	bhOff atomic.Bool
	// watched and visited count grace periods by the way they ended
	// (quickGrace, or a visit to every CPU).
	watched, visited atomic.Int64
}

// attach attaches the program to each device once; with a pin directory
// the datapath is pinned, and with a port range the range reserved,
// before its first attachment.
func (e *Engine) attach(ifindexes ...int) error {
	e.pinOwn()
	e.ports.reserve(e.home)
	for _, i := range ifindexes {
		if e.devices.isAttached(i) {
			continue
		}
		if err := e.home.do(func() error { return e.devices.attachOne(e.dp, i, e.log) }); err != nil {
			return err
		}
		e.devices.setAttached(i)
	}
	return nil
}

func (d *devices) isAttached(i int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.attached[i]
}

func (d *devices) setAttached(i int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.attached[i] = true
}

// attachOne attaches dp to device i, and the softirq watch's marker
// before it; without the marker there, grace periods visit every CPU.
func (d *devices) attachOne(dp *datapath.Datapath, i int, log *slog.Logger) error {
	if err := dp.Attach(i); err != nil {
		return err
	}
	if d.bh != nil {
		if err := d.bh.Attach(i); err != nil {
			d.bhOff.Store(true)
			log.Warn("watching the softirqs: grace periods visit every CPU from now on", "err", err)
		}
	}
	return nil
}

// startGrace begins a grace period and returns the wait for its end. A
// visit to every CPU takes tens of microseconds and runs on a goroutine
// of its own beside the caller's work; the softirq watch takes one map
// read, less than handing it to another goroutine (which may wake an idle
// CPU), so it runs in the returned wait.
func (d *devices) startGrace() (wait func()) {
	if d.bh != nil && !d.bhOff.Load() {
		return d.graces.Wait
	}
	ch := d.graces.Start()
	return func() { <-ch }
}

// bhWithin bounds the wait for a CPU still marked busy by the softirq
// watch before the grace period visits every CPU instead: a NET_RX run
// rarely lasts longer, and a CPU that delivers segments outside softirqs
// (threaded NAPI, busy polling) stays marked until its next one.
const bhWithin = 100 * time.Microsecond

// quickGrace is the grace period by the softirq watch (Graces.Quick):
// true once every CPU has delivered what passed tc before the call, false
// if the watch cannot tell (a device lacks the marker, a CPU stays busy).
func (d *devices) quickGrace() bool {
	if !d.bhOff.Load() && d.bh.WaitDone(bhWithin, tcprepair.OnlineCPUs) {
		d.watched.Add(1)
		return true
	}
	d.visited.Add(1)
	return false
}
