// Tests of the balancing policies and route matching.

package httprev

import (
	"fmt"
	"testing"

	"github.com/splicer/splicer/internal/config"
)

func pool(balance string, servers ...string) *Pool {
	return NewPool(config.Pool{Name: "p", Balance: balance, Servers: servers})
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
	p.Servers[1].healthy.Store(false)
	for range 4 {
		if s := p.Pick("", nil); s.Addr == "b:1" {
			t.Fatal("picked the unhealthy server")
		}
	}
	if s := p.Pick("", map[*Server]bool{p.Servers[0]: true, p.Servers[2]: true}); s != nil {
		t.Errorf("picked %s with every healthy server failed", s.Addr)
	}
}

func TestLeastConnTakesTheLeastLoaded(t *testing.T) {
	p := pool("least_conn", "a:1", "b:1", "c:1")
	p.Servers[0].active.Store(3)
	p.Servers[1].active.Store(1)
	p.Servers[2].active.Store(2)
	if s := p.Pick("", nil); s.Addr != "b:1" {
		t.Errorf("picked %s, want b:1 (1 connection)", s.Addr)
	}
	if s := p.Pick("", map[*Server]bool{p.Servers[1]: true}); s.Addr != "c:1" {
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
	down := p.Servers[2]
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

func TestRouteMatches(t *testing.T) {
	for _, tc := range []struct {
		route      config.Route
		host, path string
		want       bool
	}{
		{config.Route{}, "any", "/x", true},
		{config.Route{Host: "Example.com"}, "example.COM:8080", "/", true},
		{config.Route{Host: "example.com"}, "other.com", "/", false},
		{config.Route{Path: "/a"}, "h", "/a", true},
		{config.Route{Path: "/a"}, "h", "/a/b", false},
		{config.Route{PathPrefix: "/api/"}, "h", "/api/v1", true},
		{config.Route{PathPrefix: "/api/"}, "h", "/apix", false},
		{config.Route{PathSuffix: ".png"}, "h", "/img/x.png", true},
		{config.Route{PathSuffix: ".png"}, "h", "/img/x.jpg", false},
		{config.Route{Host: "a.com", PathPrefix: "/s"}, "b.com", "/s", false},
	} {
		r := Route{Route: tc.route}
		if got := r.Matches(tc.host, tc.path); got != tc.want {
			t.Errorf("%+v matches host %q path %q = %v, want %v", tc.route, tc.host, tc.path, got, tc.want)
		}
	}
}
