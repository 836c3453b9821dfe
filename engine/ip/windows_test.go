// windowsFit on made-up frozen sockets: a limited splice is refused when the sender may send past the receiver's window, whatever the other direction does.

package ip

import (
	"errors"
	"testing"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

func TestWindowsFit(t *testing.T) {
	// A response body (down: upstream -> client) of 1 MiB, the request
	// direction held. The upstream socket has received up to rcv_nxt
	// 1000 and advertised a right edge of 1000 + allowed; the client
	// socket owes outq bytes and the client's window is wnd.
	body := engine.Options{Up: engine.DirOptions{Mode: engine.Hold}, Down: engine.DirOptions{Mode: engine.Forward, Limit: 1 << 20}}
	state := func(inq, outq int, rcvNxt uint32) tcprepair.State {
		s := tcprepair.State{InQ: inq, OutQ: outq}
		s.Params.RcvNxt = rcvNxt
		return s
	}
	for _, tc := range []struct {
		name         string
		opts         engine.Options
		inq, outq    int
		allowed, wnd uint32
		refused      bool
	}{
		{"fits", body, 10 << 10, 4 << 10, 64 << 10, 128 << 10, false},
		{"fits exactly", body, 10 << 10, 4 << 10, 114 << 10, 128 << 10, false},
		{"a byte past", body, 10 << 10, 4 << 10, 114<<10 + 1, 128 << 10, true},
		{"pooled window, new client", body, 0, 0, 3 << 20, 64 << 10, true},
		{"owed bytes fill the window, nothing allowed", body, 200 << 10, 0, 0, 128 << 10, false},
		{"owed bytes fill the window, a byte allowed", body, 200 << 10, 0, 1, 128 << 10, true},
		{"up limited, fits", engine.Options{Up: engine.DirOptions{Mode: engine.Forward, Limit: 100}}, 0, 0, 0, 128 << 10, false},
		{"no limit: runs on", engine.Options{}, 0, 0, 3 << 20, 64 << 10, false},
		{"down held, up fits", engine.Options{Up: engine.DirOptions{Mode: engine.Forward, Limit: 100}, Down: engine.DirOptions{Mode: engine.Hold}}, 0, 0, 3 << 20, 64 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := state(0, tc.outq, 500)
			up := state(tc.inq, 0, 1000)
			var w [2]tcprepair.Window
			w[0].SndWnd = tc.wnd                              // the client's window, on the client socket
			w[1].RcvWup, w[1].RcvWnd = 1000-16, tc.allowed+16 // the upstream's last advertisement, before 16 more bytes came
			// Up's sender is the client: it may send 16 KiB, the server's
			// window takes 64 KiB.
			w[0].RcvWup, w[0].RcvWnd = 500, 16<<10
			w[1].SndWnd = 64 << 10
			err := windowsFit(tc.opts, client, up, w)
			if got := err != nil; got != tc.refused {
				t.Fatalf("refused %v (%v), want %v", got, err, tc.refused)
			}
			if err != nil && !errors.Is(err, errWindowMismatch) {
				t.Errorf("error %v is not errWindowMismatch", err)
			}
		})
	}
}
