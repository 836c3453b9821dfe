// splicer_bytes_total grows while a transfer runs, through every engine this host allows, not only when the pair closes.

package forwarder_test

import (
	"io"
	"net"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/engine/pipe"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
)

// bytesUp reads splicer_bytes_total{listener="t",direction="up"}.
func bytesUp(tb testing.TB, f *forwarder.Forwarder) float64 {
	tb.Helper()
	families, err := f.Metrics().Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "splicer_bytes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsEqual(m.GetLabel(), map[string]string{"listener": "t", "direction": "up"}) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelsEqual(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, l := range got {
		if want[l.GetName()] != l.GetValue() {
			return false
		}
	}
	return true
}

func TestBytesCountWhileTransferRuns(t *testing.T) {
	up := fwdtest.Echo(t)
	for _, name := range []string{copyengine.Name, pipe.Name, "auto"} {
		t.Run(name, func(t *testing.T) {
			f := startThrough(t, name, up)
			c, err := net.Dial("tcp", f.Addr("t").String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go io.Copy(io.Discard, c)
			chunk := make([]byte, 256<<10)
			var samples []float64
			for i := 0; i < 3; i++ {
				if _, err := c.Write(chunk); err != nil {
					t.Fatal(err)
				}
				want := float64((i + 1) * len(chunk))
				deadline := time.Now().Add(5 * time.Second)
				for bytesUp(t, f) < want && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				samples = append(samples, bytesUp(t, f))
			}
			for i, v := range samples {
				if want := float64((i + 1) * len(chunk)); v < want {
					t.Errorf("after %d bytes written on an open pair, splicer_bytes_total up = %v (samples %v)", int(want), v, samples)
				}
			}
		})
	}
}
