// splicer_bytes_total grows while a transfer runs, through every engine this host allows, not only when the pair closes.

package forwarder_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
)

// bytesUp reads splicer_bytes_total{listener="t",direction="up"}.
func bytesUp(f *forwarder.Forwarder) float64 {
	return fwdtest.Metric(f, "splicer_bytes_total", "listener", "t", "direction", "up")
}

func TestBytesCountWhileTransferRuns(t *testing.T) {
	throughEveryEngine(t, fwdtest.Echo(t), func(t *testing.T, f *forwarder.Forwarder, c net.Conn) {
		go io.Copy(io.Discard, c)
		chunk := make([]byte, 256<<10)
		var samples []float64
		for i := 0; i < 3; i++ {
			if _, err := c.Write(chunk); err != nil {
				t.Fatal(err)
			}
			want := float64((i + 1) * len(chunk))
			deadline := time.Now().Add(5 * time.Second)
			for bytesUp(f) < want && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			samples = append(samples, bytesUp(f))
		}
		for i, v := range samples {
			if want := float64((i + 1) * len(chunk)); v < want {
				t.Errorf("after %d bytes written on an open pair, splicer_bytes_total up = %v (samples %v)", int(want), v, samples)
			}
		}
	})
}
