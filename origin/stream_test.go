// Tests of the stream protocol and StreamCheck, including that it catches corruption.

package origin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
)

func TestStreamCheckPasses(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := newServer(t)
	addr := serve(t, s, Stream)
	for _, tt := range []struct{ up, down int64 }{
		{0, 0},
		{1, 0},
		{0, 1},
		{7, 13},
		{4 << 20, 3<<20 + 1},
		{100, 6 << 20},
	} {
		rep, err := StreamCheck(t.Context(), dial(t, addr), tt.up, tt.down)
		if err != nil {
			t.Fatalf("up %d down %d: %v", tt.up, tt.down, err)
		}
		if !rep.OK() || rep.Uploaded != tt.up || rep.Downloaded != tt.down || rep.FirstBadByte != -1 {
			t.Errorf("up %d down %d: report %+v", tt.up, tt.down, rep)
		}
	}
}

func TestStreamCheckDetectsCorruption(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := newServer(t)
	origin := serve(t, s, Stream)
	const up, down = 1 << 20, 1 << 20
	for _, tt := range []struct {
		name             string
		flipUp, flipDown int64 // offsets in each TCP stream, -1 for none
		uploadOK, downOK bool
		firstBad         int64
	}{
		{"clean", -1, -1, true, true, -1},
		{"upload", streamHeaderLen + 300_000, -1, false, true, -1},
		{"download", -1, 777_777, true, false, 777_777},
		{"first download byte", -1, 0, true, false, 0},
		{"digest", -1, down + 5, false, true, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			proxy := corruptingProxy(t, origin, tt.flipUp, tt.flipDown)
			rep, err := StreamCheck(t.Context(), dial(t, proxy), up, down)
			if tt.uploadOK && tt.downOK {
				if err != nil {
					t.Fatalf("clean stream: %v", err)
				}
			} else if !errors.Is(err, ErrMismatch) {
				t.Fatalf("err = %v, want ErrMismatch", err)
			}
			if rep.UploadOK != tt.uploadOK || rep.DownloadOK != tt.downOK || rep.FirstBadByte != tt.firstBad {
				t.Errorf("report %+v, want upload ok %v, download ok %v, first bad byte %d",
					rep, tt.uploadOK, tt.downOK, tt.firstBad)
			}
			if rep.Uploaded != up || rep.Downloaded != down {
				t.Errorf("moved %d/%d bytes, want %d/%d", rep.Uploaded, rep.Downloaded, up, down)
			}
		})
	}
}

// TestStreamCheckHonoursContext points StreamCheck at a listener nobody
// accepts on, so nothing ever answers: the check must end with the context.
func TestStreamCheckHonoursContext(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	c := dial(t, listen(t).Addr().String())
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := StreamCheck(ctx, c, 10, 10)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("StreamCheck returned %v after its context ended", waited)
	}
}

// TestStreamCheckShortStream cuts the server off mid-download: an I/O error,
// not a mismatch.
func TestStreamCheckShortStream(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := newServer(t)
	c := dial(t, serve(t, s, Stream))
	done := make(chan error, 1)
	go func() {
		_, err := StreamCheck(t.Context(), c, 0, 1<<40)
		done <- err
	}()
	testenv.Eventually(t, "the stream to start", func() bool { return s.Stats()[Stream].BytesOut > 0 })
	s.Close()
	err := <-done
	if err == nil || errors.Is(err, ErrMismatch) {
		t.Fatalf("err = %v, want an I/O error", err)
	}
}
