// Test diagnostics for a spliced pair that stops moving bytes: the datapath's tracked state beside the peers' own sockets (ss) and TCP counters (nstat), so a failing lab test explains itself.

package ip

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
)

// stallAfter is how long a spliced pair may move no byte before its
// state is captured: well under the idle timeouts the tests use.
const stallAfter = time.Second

// stallWatch captures the state of one pair while the engine follows it.
type stallWatch struct {
	el   *engineLab
	lp   labPair
	a    datapath.Tuple
	stop chan struct{}
	done chan struct{}

	mu         sync.Mutex
	shot       string    // the state when the pair last stalled, "" if it never did
	lastMoveAt time.Time // when its byte counts last changed
}

// watchStall starts watching lp, whose A tuple is a, until report is
// called.
func (el *engineLab) watchStall(lp labPair, a datapath.Tuple) *stallWatch {
	w := &stallWatch{el: el, lp: lp, a: a, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// run captures the pair's state once each time its byte counts stand
// still for stallAfter; the latest capture is kept.
func (w *stallWatch) run() {
	defer close(w.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := w.moved()
	w.setLastMove(time.Now())
	captured := false
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if n := w.moved(); n != last {
			last, captured = n, false
			w.setLastMove(time.Now())
			continue
		}
		if captured || time.Since(w.lastMove()) < stallAfter {
			continue
		}
		if st, err := w.el.e.dp.Lookup(w.a); err != nil || st.Up.Mode == engine.Hold {
			continue // not (or no longer) in the datapath, or still being spliced
		}
		captured = true
		s := w.capture()
		w.mu.Lock()
		w.shot = s
		w.mu.Unlock()
	}
}

func (w *stallWatch) setLastMove(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastMoveAt = t
}

func (w *stallWatch) lastMove() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastMoveAt
}

// moved is what the pair has counted each way so far.
func (w *stallWatch) moved() [2]int64 {
	return [2]int64{w.lp.p.Bytes(engine.Up), w.lp.p.Bytes(engine.Down)}
}

// report stops the watch and returns what it captured, or "".
func (w *stallWatch) report() string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.shot
}

// explain returns the capture of the pair's stall, or, if it never
// stalled, its state now, for a failure message.
func (w *stallWatch) explain(stall string) string {
	if stall != "" {
		return stall
	}
	if _, err := w.el.e.dp.Lookup(w.a); err != nil {
		return fmt.Sprintf("\n--- pair %v: no longer in the datapath (%v)", w.a, err)
	}
	return w.capture()
}

// capture describes the pair in the datapath (sequence numbers in each
// sender's space, with the offsets to translate them) and the peers'
// sockets as ss sees them.
func (w *stallWatch) capture() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n--- pair %v, moved %v, last move %v ago\n", w.a, w.moved(), time.Since(w.lastMove()).Round(time.Millisecond))
	if st, err := w.el.e.dp.Lookup(w.a); err == nil {
		fmt.Fprintf(&b, "phase %v\n", st.Phase)
		for _, d := range []engine.Direction{engine.Up, engine.Down} {
			ds := st.Dir(d)
			fmt.Fprintf(&b, "%v: snd_nxt %d ack_hi %d win %d ts %d bytes %d packets %d fin %v finacked %v last %v ago, seqoff/tsoff %v\n",
				d, ds.SndNxt, ds.AckHi, ds.Window, ds.TSLast, ds.Bytes, ds.Packets, ds.FIN, ds.FINAcked,
				datapath.Now()-ds.LastSeen, w.offsets(d))
		}
	}
	if drops, err := w.el.e.dp.Drops(); err == nil {
		fmt.Fprintf(&b, "drops %v\n", drops)
	}
	port := fmt.Sprint(w.a.Dst.Port())
	b.WriteString(w.ss("client", w.el.l.Client.Command, "dport", "=", ":"+port))
	b.WriteString(w.ss("server", w.el.l.Server.Command, "sport", "=", ":"+port))
	b.WriteString(w.nstat("client", w.el.l.Client.Command))
	b.WriteString(w.nstat("server", w.el.l.Server.Command))
	return b.String()
}

// offsets are direction d's published SeqOff and TSOff.
func (w *stallWatch) offsets(d engine.Direction) [2]uint32 {
	seqOff, tsOff, err := w.el.e.dp.Offsets(w.a, d)
	if err != nil {
		return [2]uint32{}
	}
	return [2]uint32{seqOff, tsOff}
}

// ss runs ss for the sockets matching filter in a namespace.
func (w *stallWatch) ss(name string, command func(context.Context, string, ...string) *exec.Cmd, filter ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := command(ctx, "ss", append([]string{"-tinmoeH", "state", "all"}, filter...)...).Output() // stderr holds only ss's cgroup warnings
	if err != nil {
		return fmt.Sprintf("%s: ss: %v\n", name, err)
	}
	return fmt.Sprintf("%s: %s\n", name, out)
}

// nstat lists a namespace's non-zero TCP counters (PAWS rejects,
// challenge ACKs, too-old ACKs and the like are namespace-wide).
func (w *stallWatch) nstat(name string, command func(context.Context, string, ...string) *exec.Cmd) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := command(ctx, "nstat", "-as").Output()
	if err != nil {
		return fmt.Sprintf("%s: nstat: %v\n", name, err)
	}
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Tcp") {
			keep = append(keep, strings.Join(strings.Fields(l)[:2], " "))
		}
	}
	return fmt.Sprintf("%s counters: %s\n", name, strings.Join(keep, ", "))
}
