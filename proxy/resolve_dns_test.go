// A pool's resolver asks the name servers its configuration gives, over UDP: A and SRV records as a name server sends them, and changes to them followed.

package proxy_test

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/proxytest"
)

// health is each of p's servers as "server resolved_from backup".
func health(p *proxy.Pool) []string {
	var out []string
	for _, h := range p.Health() {
		s := h.Server + " " + h.ResolvedFrom
		if h.Backup {
			s += " backup"
		}
		out = append(out, s)
	}
	return out
}

func TestPoolAsksItsNameservers(t *testing.T) {
	dns := proxytest.NewDNS(t)
	dns.SetAddrs("web.splicer.test", "127.0.0.1", "127.0.0.2")
	dns.SetAddrs("a.splicer.test", "127.0.0.3")
	dns.SetAddrs("b.splicer.test", "127.0.0.4")
	dns.SetSRV("_http._tcp.api.splicer.test",
		net.SRV{Target: "a.splicer.test", Port: 8080, Priority: 1, Weight: 1},
		net.SRV{Target: "b.splicer.test", Port: 8081, Priority: 2, Weight: 1})
	p := proxy.NewPool(config.Pool{Name: "p",
		Resolver: &config.Resolver{Nameservers: []string{dns.Addr}, Interval: config.Duration(time.Second)},
		Servers: []config.PoolServer{
			{Address: "web.splicer.test:80", Weight: 1, Resolve: true},
			{SRV: "_http._tcp.api.splicer.test", Weight: 1},
		}})
	p.StartChecks(nil, nil)
	t.Cleanup(func() { p.Close() })
	want := []string{
		"127.0.0.1:80 web.splicer.test:80", "127.0.0.2:80 web.splicer.test:80",
		"127.0.0.3:8080 _http._tcp.api.splicer.test", "127.0.0.4:8081 _http._tcp.api.splicer.test backup",
	}
	if got := health(p); !slices.Equal(got, want) {
		t.Fatalf("servers %q, want %q", got, want)
	}

	dns.SetAddrs("web.splicer.test", "127.0.0.5")
	want[0], want = "127.0.0.5:80 web.splicer.test:80", slices.Delete(want, 1, 2)
	testenv.Eventually(t, "the changed record followed (interval 1s)", func() bool { return slices.Equal(health(p), want) })
}
