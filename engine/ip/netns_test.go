// Tests of the engine's namespace: the route cache answers from memory and follows routing changes.

package ip

import (
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// TestRouteCacheFollowsRouteChanges: the device toward the server is
// cached after the first lookup; a host route through the client's device
// replaces it as soon as it is added, and removing it brings the old
// answer back.
func TestRouteCacheFollowsRouteChanges(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 4})
	h := el.e.home
	if h.routes.watch == nil {
		testenv.SkipOrFail(t, "the engine does not watch route changes")
	}
	server := el.l.Cfg.Server.Addr()
	toServer, err := el.l.Fwd.LinkIndex(lab.FwdServerIf)
	if err != nil {
		t.Fatal(err)
	}
	toClient, err := el.l.Fwd.LinkIndex(lab.FwdClientIf)
	if err != nil {
		t.Fatal(err)
	}
	deviceIs := func(want int) func() bool {
		return func() bool {
			got, err := h.deviceTo(server)
			return err == nil && got == want
		}
	}
	if !deviceIs(toServer)() {
		t.Fatalf("device toward %v: want %d", server, toServer)
	}
	if _, _, ok := h.routes.get(server); !ok {
		t.Fatalf("the device toward %v was not cached", server)
	}
	nl, err := el.l.Fwd.Netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	host := &netlink.Route{LinkIndex: toClient, Dst: &net.IPNet{IP: server.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := nl.RouteAdd(host); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the host route through the client's device", deviceIs(toClient))
	if err := nl.RouteDel(host); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the route through the server's device again", deviceIs(toServer))
}

// TestHomeDo: this process's threads live outside the forwarder's
// namespace, where the engine was loaded, and Splice runs on its caller's
// goroutine, whose thread may be locked in yet another namespace (here
// the client's): do runs its function in the engine's namespace and
// brings the thread back where it was.
func TestHomeDo(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 4})
	h := el.e.home
	if h.atHome || !h.outside.IsOpen() {
		t.Fatalf("the engine's namespace: at home %v, outside %v; want the test's threads outside it", h.atHome, h.outside)
	}
	current := func() netns.NsHandle {
		cur, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cur.Close() })
		return cur
	}
	err := el.l.Client.Do(func() error {
		client := current()
		var inside bool
		if err := h.do(func() error { inside = current().Equal(h.ns); return nil }); err != nil {
			return err
		}
		if back := current(); !inside || !back.Equal(client) {
			t.Errorf("in the engine's namespace within do: %v (want true); back in the client's after: %v (want true)", inside, back.Equal(client))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
