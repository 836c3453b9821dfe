// Spliced ip pairs outliving the daemon: SIGKILL 'splicer run' in the middle of a transfer, start it again with the same configuration, and the transfer finishes intact while the new process adopts, lists and then unpins the pair.

package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// TestRunIPPairSurvivesSIGKILL: a tcp listener on engine ip carries a
// transfer of 256 MiB each way (client and server each send their own
// data, paced over about 7 s, and check the sha256 of what they receive);
// once /flows shows the pair spliced with 32 MiB moved each way, the
// daemon gets SIGKILL. Its BPF program, pinned, keeps forwarding; a new
// daemon started with the same configuration adopts the pair (its /flows
// lists it, adopted), both transfers end intact by FIN, and once the
// pair's TIME_WAIT is over the new daemon unpins it. After a SIGTERM
// nothing is pinned and no program is attached to the forwarder's devices.
func TestRunIPPairSurvivesSIGKILL(t *testing.T) { testIPPairSurvives(t, false) }

// TestRunIPPairSurvivesUpgrade is the same with an upgrade instead of the
// kill: the old process follows the pair through its 1 s shutdown_timeout,
// then leaves it pinned and exits; the new process adopts it.
func TestRunIPPairSurvivesUpgrade(t *testing.T) { testIPPairSurvives(t, true) }

func testIPPairSurvives(t *testing.T, upgrade bool) {
	l := lab.NewT(t, lab.DefaultConfig())
	s := labSite(l)
	pinDir := filepath.Join(testenv.MountBPFFS(t), "splicer", "survive")

	const size = 256 << 20
	srvLn, err := s.listenUp(net.JoinHostPort(s.upIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srvLn.Close() })
	fwdAddr := net.JoinHostPort(s.fwdIP, "17300")
	grace := "5s"
	if upgrade {
		grace = "1s"
	}
	cfg := daemonYAML(s, grace, listenerYAML("ip", fwdAddr, srvLn.Addr().String(), "ip")) +
		fmt.Sprintf("engines:\n  ip: {time_wait: 2s, pin_dir: %s}\n", pinDir)

	first := s.startRun(t, cfg)
	server := make(chan *duplex, 1)
	go func() {
		c, err := srvLn.Accept()
		if err != nil {
			close(server)
			return
		}
		server <- startDuplex(t, c, size, 2)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := s.dial(ctx, "tcp", fwdAddr)
	if err != nil {
		t.Fatal(err)
	}
	client := startDuplex(t, cc, size, 1)
	// Well into the transfer, with 32 MiB moved each way.
	waitUntil(t, "the pair spliced by ip, 32 MiB each way", first.exited, func() bool {
		f := s.findFlow(func(f map[string]any) bool { return f["engine"] == "ip" && f["state"] == "spliced" })
		return f != nil && f["bytes_up"].(float64) >= 32<<20 && f["bytes_down"].(float64) >= 32<<20
	})

	// next is the process that adopts: its logs, its exit, and how to stop it.
	var next struct {
		logs   func() string
		exited <-chan error
		stop   func() error
	}
	if upgrade {
		if out, err := s.command(ctx, splicerBinary(t), "upgrade", "--admin", s.adminAddr).CombinedOutput(); err != nil {
			t.Fatalf("splicer upgrade: %v: %s", err, out)
		}
		waitExitZero(t, "the old process after the upgrade", first.exited, 30*time.Second)
		if !strings.Contains(first.logs(), `msg="leaving spliced pairs pinned for the next process"`) {
			t.Errorf("the old process did not log that it left the pair pinned")
		}
		pid := first.pid()
		next.logs = first.logs // the new process writes to the same file
		next.stop = func() error {
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				return err
			}
			for i := 0; i < 1200 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(25 * time.Millisecond)
			}
			if syscall.Kill(pid, 0) == nil {
				return errors.New("still running 30 s after SIGTERM")
			}
			return nil
		}
	} else {
		if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-first.exited
		if gens, err := os.ReadDir(pinDir); err != nil || len(gens) != 1 {
			t.Fatalf("after SIGKILL the pin directory holds %v (%v), want the killed daemon's datapath", gens, err)
		}
		second := s.startRun(t, cfg)
		next.logs, next.exited = second.logs, second.exited
		next.stop = func() error {
			if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				return err
			}
			select {
			case err := <-second.exited:
				return err
			case <-time.After(30 * time.Second):
				return errors.New("still running 30 s after SIGTERM")
			}
		}
	}

	waitUntil(t, "the adopted pair in /flows", next.exited, func() bool {
		f := s.adoptedFlow()
		return f != nil && f["engine"] == "ip" && f["listener"] == "ip" && f["state"] == "spliced" &&
			f["client"] == cc.LocalAddr().String() && f["upstream"] == srvLn.Addr().String()
	})
	select {
	case <-client.done:
		t.Errorf("the transfer was over before the new daemon listed the adopted pair")
	default:
	}
	var srv *duplex
	select {
	case srv = <-server:
	case <-time.After(testenv.Wait):
	}
	if srv == nil {
		t.Fatal("the server accepted no connection")
	}
	for _, d := range []struct {
		name string
		d    *duplex
	}{{"client", client}, {"server", srv}} {
		if err := d.d.wait(90 * time.Second); err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
	}
	if client.recvSum != srv.sentSum || srv.recvSum != client.sentSum {
		t.Fatalf("sha256 mismatch: client got %x, server sent %x; server got %x, client sent %x",
			client.recvSum, srv.sentSum, srv.recvSum, client.sentSum)
	}

	waitUntil(t, "the adopted pair unpinned after TIME_WAIT", next.exited, func() bool {
		_, err := os.Stat(pinDir)
		return s.adoptedFlow() == nil && errors.Is(err, os.ErrNotExist)
	})
	if n := l.FwdIngressProgramsT(t); n != 0 {
		t.Errorf("%d programs at tcx ingress of the forwarder's devices once the adopted pair is over", n)
	}
	if err := next.stop(); err != nil {
		t.Errorf("the new daemon after SIGTERM: %v", err)
	}
	if _, err := os.Stat(pinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after SIGTERM %s is still there: %v", pinDir, err)
	}
	if n := l.FwdIngressProgramsT(t); n != 0 {
		t.Errorf("after SIGTERM %d programs at tcx ingress of the forwarder's devices", n)
	}
	logs := next.logs()
	for _, want := range []string{`msg="adopted a pinned datapath"`, "pairs=1", `msg="adopted pair ended"`, "end=eof", `msg="adopted pairs all over: their datapath is unpinned"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the new daemon's log lacks %q", want)
		}
	}
}

// adoptedFlow is the first pair /flows marks adopted, or nil.
func (s *site) adoptedFlow() map[string]any {
	return s.findFlow(func(f map[string]any) bool { return f["adopted"] == true })
}

// findFlow is the first pair of /flows that match accepts, or nil.
func (s *site) findFlow(match func(map[string]any) bool) map[string]any {
	resp, err := s.admin.Get("http://" + s.adminAddr + "/flows")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var flows []map[string]any
	if json.NewDecoder(resp.Body).Decode(&flows) != nil {
		return nil
	}
	for _, f := range flows {
		if match(f) {
			return f
		}
	}
	return nil
}

// duplex is one end of a transfer both ways: it sends size bytes of its
// own (a ChaCha8 stream from seed), paced, then a FIN, and reads the other
// end's bytes to EOF, hashing both.
type duplex struct {
	sentSum, recvSum [32]byte
	done             chan struct{}
	err              error
}

func startDuplex(tb testing.TB, c net.Conn, size int, seed byte) *duplex {
	tb.Helper()
	tb.Cleanup(func() { c.Close() })
	d := &duplex{done: make(chan struct{})}
	sent := make(chan error, 1)
	go func() {
		h := sha256.New()
		rng := rand.NewChaCha8([32]byte{seed})
		buf := make([]byte, 1<<20)
		for off := 0; off < size; off += len(buf) {
			rng.Read(buf)
			h.Write(buf)
			if _, err := c.Write(buf); err != nil {
				sent <- fmt.Errorf("send after %d bytes: %w", off, err)
				return
			}
			// Paced, so that the transfer outlasts the kill and the restart.
			time.Sleep(25 * time.Millisecond)
		}
		d.sentSum = sum(h)
		sent <- c.(*net.TCPConn).CloseWrite()
	}()
	go func() {
		defer close(d.done)
		h := sha256.New()
		n, err := io.Copy(h, c) // nil at EOF: the other end's FIN, not a reset
		errSend := <-sent
		switch {
		case err != nil:
			d.err = fmt.Errorf("receive after %d bytes: %w", n, err)
		case errSend != nil:
			d.err = errSend
		case n != int64(size):
			d.err = fmt.Errorf("received %d bytes, want %d", n, size)
		}
		d.recvSum = sum(h)
	}()
	return d
}

func sum(h hash.Hash) (s [32]byte) {
	copy(s[:], h.Sum(nil))
	return s
}

func (d *duplex) wait(within time.Duration) error {
	select {
	case <-d.done:
		return d.err
	case <-time.After(within):
		return fmt.Errorf("not done after %v", within)
	}
}
