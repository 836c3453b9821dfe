// Tests of the balancing policies.

package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/config"
)

func pool(balance string, servers ...string) *Pool {
	return NewPool(config.Pool{Name: "p", Balance: balance, Servers: config.Servers(servers...)})
}

func TestRoundRobinTakesTurnsAndSkipsUnhealthy(t *testing.T) {
	p := pool("", "a:1", "b:1", "c:1")
	var got []string
	for range 6 {
		got = append(got, p.Pick("", nil).Addr)
	}
	if fmt.Sprint(got) != "[a:1 b:1 c:1 a:1 b:1 c:1]" {
		t.Errorf("picks %v, want a b c in turn", got)
	}
	p.Servers()[1].healthy.Store(false)
	for range 4 {
		if s := p.Pick("", nil); s.Addr == "b:1" {
			t.Fatal("picked the unhealthy server")
		}
	}
	if s := p.Pick("", map[*Server]bool{p.Servers()[0]: true, p.Servers()[2]: true}); s != nil {
		t.Errorf("picked %s with every healthy server failed", s.Addr)
	}
}

func TestLeastConnTakesTheLeastLoaded(t *testing.T) {
	p := pool("least_conn", "a:1", "b:1", "c:1")
	p.Servers()[0].active.Store(3)
	p.Servers()[1].active.Store(1)
	p.Servers()[2].active.Store(2)
	if s := p.Pick("", nil); s.Addr != "b:1" {
		t.Errorf("picked %s, want b:1 (1 connection)", s.Addr)
	}
	if s := p.Pick("", map[*Server]bool{p.Servers()[1]: true}); s.Addr != "c:1" {
		t.Errorf("with b failed picked %s, want c:1", s.Addr)
	}
}

func TestConsistentHashIsStableAndMovesFewKeys(t *testing.T) {
	p := pool("consistent_hash", "a:1", "b:1", "c:1", "d:1")
	keys := make([]string, 1000)
	before := map[string]*Server{}
	count := map[string]int{}
	for i := range keys {
		keys[i] = fmt.Sprintf("10.0.%d.%d", i/250, i%250)
		s := p.Pick(keys[i], nil)
		before[keys[i]] = s
		count[s.Addr]++
		if again := p.Pick(keys[i], nil); again != s {
			t.Fatalf("key %s went to %s, then %s", keys[i], s.Addr, again.Addr)
		}
	}
	for addr, n := range count {
		if n < 100 || n > 450 {
			t.Errorf("server %s got %d of 1000 keys; the ring is badly unbalanced: %v", addr, n, count)
		}
	}
	down := p.Servers()[2]
	down.healthy.Store(false)
	for _, k := range keys {
		s := p.Pick(k, nil)
		if s == down {
			t.Fatalf("key %s went to the unhealthy server", k)
		}
		if before[k] != down && s != before[k] {
			t.Errorf("key %s moved from %s to %s though its server is up", k, before[k].Addr, s.Addr)
		}
	}
}

// weighted is a pool of servers named by addr with weights.
func weighted(balance string, servers ...config.PoolServer) *Pool {
	return NewPool(config.Pool{Name: "p", Balance: balance, Servers: servers})
}

func TestRoundRobinSpreadsByWeight(t *testing.T) {
	p := weighted("", config.PoolServer{Address: "a:1", Weight: 5}, config.PoolServer{Address: "b:1", Weight: 1},
		config.PoolServer{Address: "c:1", Weight: 1}, config.PoolServer{Address: "drained:1", Weight: 0})
	var got []string
	for range 14 {
		got = append(got, p.Pick("", nil).Addr[:1])
	}
	// nginx's smooth weighted round robin: b and c between a's, not after them.
	if want := "[a a b a c a a a a b a c a a]"; fmt.Sprint(got) != want {
		t.Errorf("picks %v, want %s", got, want)
	}
	p.Servers()[0].healthy.Store(false)
	for range 4 {
		if s := p.Pick("", nil); s.Addr != "b:1" && s.Addr != "c:1" {
			t.Fatalf("picked %s with a unhealthy: want b or c, never the drained server", s.Addr)
		}
	}
}

func TestLeastConnWeighsConnectionsByWeight(t *testing.T) {
	p := weighted("least_conn", config.PoolServer{Address: "big:1", Weight: 4}, config.PoolServer{Address: "small:1", Weight: 1},
		config.PoolServer{Address: "drained:1", Weight: 0})
	p.Servers()[0].active.Store(6) // 1.5 per weight
	p.Servers()[1].active.Store(2) // 2 per weight
	if s := p.Pick("", nil); s.Addr != "big:1" {
		t.Errorf("picked %s, want big:1 (fewer connections for its weight)", s.Addr)
	}
	p.Servers()[0].active.Store(9) // 2.25 per weight
	if s := p.Pick("", nil); s.Addr != "small:1" {
		t.Errorf("picked %s, want small:1", s.Addr)
	}
}

func TestConsistentHashGivesKeysByWeight(t *testing.T) {
	p := weighted("consistent_hash", config.PoolServer{Address: "a:1", Weight: 3}, config.PoolServer{Address: "b:1", Weight: 1},
		config.PoolServer{Address: "drained:1", Weight: 0})
	count := map[string]int{}
	for i := range 4000 {
		count[p.Pick(fmt.Sprintf("10.%d.%d.1", i/250, i%250), nil).Addr]++
	}
	if count["drained:1"] != 0 {
		t.Errorf("the server of weight 0 got %d keys", count["drained:1"])
	}
	// 3000 and 1000 expected; the ring's spread allows some slack.
	if a := count["a:1"]; a < 2600 || a > 3400 {
		t.Errorf("a (weight 3) got %d of 4000 keys, want about 3000: %v", a, count)
	}
}

// TestDrainedServersAreNotPicked: a drained server gets no pick under any
// balance until it is ready again; with every server drained there is
// none to pick.
func TestDrainedServersAreNotPicked(t *testing.T) {
	for _, balance := range []string{"round_robin", "least_conn", "consistent_hash"} {
		t.Run(balance, func(t *testing.T) {
			p := pool(balance, "a:1", "b:1")
			if n := p.Drain("a:1", true); n != 1 {
				t.Fatalf("Drain found %d servers, want 1", n)
			}
			for i := range 20 {
				if s := p.Pick(fmt.Sprintf("10.0.0.%d", i), nil); s == nil || s.Addr != "b:1" {
					t.Fatalf("pick %d with a drained: %v, want b", i, s)
				}
			}
			p.Drain("b:1", true)
			if s := p.Pick("10.0.0.1", nil); s != nil {
				t.Fatalf("picked %s with every server drained", s.Addr)
			}
			p.Drain("a:1", false)
			if s := p.Pick("10.0.0.1", nil); s == nil || s.Addr != "a:1" {
				t.Fatalf("pick after a is ready again: %v, want a", s)
			}
			if h := p.Health(); !h[1].Drained || h[0].Drained {
				t.Errorf("Health says a drained %v, b drained %v; want false, true", h[0].Drained, h[1].Drained)
			}
		})
	}
}

// TestBackupsStandInForTheOthers: under every balance, backups get no
// pick while a primary server can take it; once none can (unhealthy,
// drained, skipped for failures), the backups share the picks, round
// robin taking them in turn; a primary back in health takes over again.
func TestBackupsStandInForTheOthers(t *testing.T) {
	for _, balance := range []string{"round_robin", "least_conn", "consistent_hash"} {
		t.Run(balance, func(t *testing.T) {
			p := NewPool(config.Pool{Name: "p", Balance: balance, Servers: []config.PoolServer{
				{Address: "a:1", Weight: 1}, {Address: "b:1", Weight: 1},
				{Address: "x:1", Weight: 1, Backup: true}, {Address: "y:1", Weight: 1, Backup: true},
			}})
			picks := func() map[string]int {
				got := map[string]int{}
				for i := range 40 {
					s := p.Pick(fmt.Sprintf("10.0.%d.1", i), nil)
					if s == nil {
						t.Fatal("no pick")
					}
					got[s.Addr[:1]]++
					if balance == "least_conn" {
						s.Hold() // so that least_conn spreads them
					}
				}
				for _, s := range p.Servers() {
					s.active.Store(0)
				}
				return got
			}
			if got := picks(); got["x"]+got["y"] != 0 {
				t.Errorf("with both primaries up: %v, want no backup", got)
			}
			p.Servers()[0].healthy.Store(false)
			p.Drain("b:1", true)
			got := picks()
			if got["a"]+got["b"] != 0 || got["x"]+got["y"] != 40 {
				t.Errorf("with a unhealthy and b drained: %v, want the backups only", got)
			}
			if balance != "consistent_hash" && (got["x"] != 20 || got["y"] != 20) {
				t.Errorf("the backups shared 40 picks %d and %d, want 20 each", got["x"], got["y"])
			}
			p.Drain("b:1", false)
			p.Servers()[1].fails.Failed(config.FailPolicy{MaxFails: 1, Timeout: time.Hour}, time.Now())
			if got := picks(); got["x"]+got["y"] != 40 {
				t.Errorf("with a unhealthy and b skipped for failures: %v, want the backups only", got)
			}
			p.Servers()[1].fails.Succeeded()
			if got := picks(); got["b"] != 40 {
				t.Errorf("with b back: %v, want b alone", got)
			}
		})
	}
}

// TestSkippedPrimariesComeBeforeNoServer: when every server is skipped
// for failures, backups included, a primary is picked all the same.
func TestSkippedPrimariesComeBeforeNoServer(t *testing.T) {
	p := NewPool(config.Pool{Name: "p", Servers: []config.PoolServer{{Address: "a:1", Weight: 1}, {Address: "x:1", Weight: 1, Backup: true}}})
	for _, s := range p.Servers() {
		s.fails.Failed(config.FailPolicy{MaxFails: 1, Timeout: time.Hour}, time.Now())
	}
	if s := p.Pick("", nil); s == nil || s.Addr != "a:1" {
		t.Errorf("every server skipped: picked %v, want the primary a", s)
	}
}

// TestFullServersArePassedOver: a server with max_conns connections held
// is not picked, Hold refuses it a connection more, and with every server
// full there is none to pick; a released connection makes room.
func TestFullServersArePassedOver(t *testing.T) {
	p := NewPool(config.Pool{Name: "p", Servers: []config.PoolServer{{Address: "a:1", Weight: 1, MaxConns: 2}, {Address: "b:1", Weight: 1, MaxConns: 1}}})
	a, b := p.Servers()[0], p.Servers()[1]
	if !a.Hold() || !a.Hold() {
		t.Fatal("a refused one of its 2 connections")
	}
	if a.Hold() {
		t.Fatal("a took a third connection over max_conns 2")
	}
	for range 4 {
		if s := p.Pick("", nil); s != b {
			t.Fatalf("picked %v with a full, want b", s)
		}
	}
	b.Hold()
	if s := p.Pick("", nil); s != nil {
		t.Fatalf("picked %s with every server full", s.Addr)
	}
	if h := p.Health(); h[0].Active != 2 || h[1].Active != 1 {
		t.Errorf("Health says active %d and %d, want 2 and 1", h[0].Active, h[1].Active)
	}
	a.Release()
	if s := p.Pick("", nil); s != a {
		t.Fatalf("picked %v after a released one, want a", s)
	}
}
