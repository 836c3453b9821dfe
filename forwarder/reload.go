// Reload: apply a new configuration's listeners while pairs in flight run on under the configuration they started with.

package forwarder

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"syscall"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/handoff"
	"github.com/splicer/splicer/proxy"
)

// Reload applies cfg's listeners: an unchanged listener keeps running,
// its proxy's files read again (proxy.FileReloader: renewed TLS
// certificates, for new connections), a new one is bound, a removed one stops accepting and its pairs get
// shutdown_timeout to finish, and a changed one is replaced: the
// replacement takes over the listening socket when the address is the
// same, so no connection attempt is refused, and the old listener's pairs
// finish under the old settings however long they run (a reload is not a
// shutdown: a download must not end because a setting changed); only a
// shutdown, an upgrade's drain included, closes them at its
// shutdown_timeout. Nothing changes when any new listener cannot be built
// or bound, or a kept one's files cannot be read. Sections a reload cannot apply (engines, admin, log) are
// reported in the returned notes; they take effect at the next start.
func (f *Forwarder) Reload(cfg *config.Config) (notes []string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil, errors.New("shutting down")
	}
	plan, err := f.planReload(cfg)
	if err != nil {
		return nil, err
	}
	if err := bindAll(plan.toBind()); err != nil {
		plan.abandon()
		return nil, err
	}
	for _, commit := range plan.files {
		commit()
	}
	for nl, old := range plan.takeover {
		handOver(old, nl)
	}
	for _, nl := range plan.fresh {
		nl.start()
	}
	for _, old := range plan.retired {
		if plan.replaced(old) {
			f.supersede(old)
		} else {
			f.remove(old, cfg.ShutdownTimeout.Std())
		}
	}
	f.listeners = plan.next
	notes = restartNotes(f.cfg, cfg)
	f.cfg = cfg
	f.gc.configure(cfg.Memory)
	return notes, nil
}

// reloadPlan is what a reload will do, built before anything is touched.
type reloadPlan struct {
	next     []*listener // the listeners after the reload, in config order
	fresh    []*listener // built for this reload, not yet bound (unless taking over)
	takeover map[*listener]*listener
	retired  []*listener
	// files put in use what kept listeners read again (proxy.FileReloader).
	files []func()
}

// abandon releases what the plan built when the reload is refused.
func (p *reloadPlan) abandon() {
	for _, nl := range p.fresh {
		nl.life.cancel()
		nl.closeProxy()
	}
}

// planReload matches cfg's listeners to the running ones: same name and
// same settings keeps the listener; anything else builds a new one, which
// takes over the socket of a retiring listener on the same address.
func (f *Forwarder) planReload(cfg *config.Config) (*reloadPlan, error) {
	byName := map[string]*listener{}
	for _, l := range f.listeners {
		byName[l.cfg.Name] = l
	}
	kept := map[*listener]bool{}
	p := &reloadPlan{takeover: map[*listener]*listener{}}
	for _, lc := range cfg.Listeners {
		if old := byName[lc.Name]; old != nil && reflect.DeepEqual(old.cfg, lc) {
			if err := p.rereadFiles(old); err != nil {
				p.abandon()
				return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
			}
			kept[old] = true
			p.next = append(p.next, old)
			continue
		}
		nl, err := newListener(f, lc)
		if err != nil {
			p.abandon()
			return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
		}
		if old := byName[lc.Name]; old != nil {
			inheritUpstreams(old.proxy, nl.proxy)
		}
		p.fresh = append(p.fresh, nl)
		p.next = append(p.next, nl)
	}
	for _, old := range f.listeners {
		if !kept[old] {
			p.retired = append(p.retired, old)
		}
	}
	claimed := map[*listener]bool{}
	for _, nl := range p.fresh {
		for _, old := range p.retired {
			if !claimed[old] && old.cfg.Listen == nl.cfg.Listen && canHandOver(old) {
				claimed[old] = true
				p.takeover[nl] = old
				break
			}
		}
	}
	return p, nil
}

// rereadFiles has a kept listener's proxy read its files again (a
// certificate renewed on disk), for the reload to put in use.
func (p *reloadPlan) rereadFiles(l *listener) error {
	fr, ok := l.proxy.(proxy.FileReloader)
	if !ok {
		return nil
	}
	commit, err := fr.ReloadFiles()
	if err != nil {
		return err
	}
	p.files = append(p.files, commit)
	return nil
}

// replaced reports whether the reload puts a listener of the same name in
// old's place (a changed listener) rather than removing it.
func (p *reloadPlan) replaced(old *listener) bool {
	for _, nl := range p.fresh {
		if nl.cfg.Name == old.cfg.Name {
			return true
		}
	}
	return false
}

// toBind is the new listeners that need a socket of their own.
func (p *reloadPlan) toBind() []*listener {
	var ls []*listener
	for _, nl := range p.fresh {
		if p.takeover[nl] == nil {
			ls = append(ls, nl)
		}
	}
	return ls
}

// deadliner is a listening socket whose Accept can be woken up without
// closing it.
type deadliner interface{ SetDeadline(time.Time) error }

func canHandOver(l *listener) bool {
	_, ok := l.ln.(deadliner)
	return ok
}

// handOver moves old's listening socket to nl: old's accept loop is woken
// by a deadline in the past and returns without closing the socket, then
// nl accepts on it. Connections waiting in the accept queue meanwhile are
// accepted by nl: none is refused.
func handOver(old, nl *listener) {
	ln := old.ln
	old.life.handover.Store(true)
	ln.(deadliner).SetDeadline(time.Unix(1, 0))
	old.life.waitServed()
	ln.(deadliner).SetDeadline(time.Time{})
	old.ln = nil
	nl.ln = ln
	nl.setListenerKeepAlive(old.quietAccept)
	nl.log.Info("listening", append([]any{"addr", ln.Addr().String(), "proxy", nl.cfg.Proxy}, append(nl.engineAttrs(), "taken_over", true)...)...)
}

// supersede retires old, which a changed listener of the same name
// replaces: its pairs run on the old settings until they end, or until a
// shutdown closes them at its shutdown_timeout, as it does every pair.
func (f *Forwarder) supersede(old *listener) {
	old.log.Info("listener replaced by reload: its open pairs finish on the old settings", "open_pairs", old.active.Load())
	f.retire(old, old.life.finish)
}

// remove retires old, which the new configuration no longer has: its pairs
// get grace (shutdown_timeout) to finish, then are closed.
func (f *Forwarder) remove(old *listener, grace time.Duration) {
	old.log.Info("listener removed by reload", "open_pairs", old.active.Load(), "grace", grace.String())
	f.retire(old, func() {
		if cut := old.life.drain(grace); cut {
			old.log.Warn("reload: pairs of a removed listener closed after shutdown_timeout")
		}
	})
}

// retire stops old from accepting (unless its socket was handed over) and,
// in the background, runs wait, which returns once old's pairs are over,
// then releases old's proxy; f.mu held. Until then old is retiring: a
// shutdown stops and waits for its pairs as for the current listeners'.
func (f *Forwarder) retire(old *listener, wait func()) {
	old.life.stop()
	old.close()
	f.retiring[old] = struct{}{}
	go func() {
		wait()
		old.closeProxy()
		f.mu.Lock()
		delete(f.retiring, old)
		f.mu.Unlock()
	}()
}

// restartNotes names the sections of next that differ from cur and that a
// reload does not apply.
func restartNotes(cur, next *config.Config) []string {
	var notes []string
	if !reflect.DeepEqual(cur.Engines, next.Engines) {
		notes = append(notes, "engines changed: takes effect at the next start")
	}
	if cur.Admin != next.Admin {
		notes = append(notes, "admin changed: takes effect at the next start")
	}
	if cur.User != next.User {
		notes = append(notes, "user changed: takes effect at the next start")
	}
	if cur.AccessLog != next.AccessLog {
		notes = append(notes, "access_log changed: takes effect at the next start")
	}
	if !reflect.DeepEqual(cur.Log, next.Log) {
		notes = append(notes, "log changed: takes effect at the next start")
	}
	return notes
}

// ListenerFiles returns a duplicate of every current listener's socket by
// listener name, for handing them to a new process (a hitless upgrade).
// The caller closes the files.
func (f *Forwarder) ListenerFiles() (map[string]*os.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	files := map[string]*os.File{}
	for _, l := range f.listeners {
		sc, ok := l.ln.(syscall.Conn)
		if !ok {
			return closeAll(files), fmt.Errorf("listener %s: socket cannot be handed over", l.cfg.Name)
		}
		file, err := handoff.Dup(sc)
		if err != nil {
			return closeAll(files), fmt.Errorf("listener %s: %w", l.cfg.Name, err)
		}
		files[l.cfg.Name] = file
	}
	return files, nil
}

func closeAll(files map[string]*os.File) map[string]*os.File {
	for _, f := range files {
		f.Close()
	}
	return nil
}

// Config returns the configuration the forwarder runs.
func (f *Forwarder) Config() *config.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg
}
