// parseWrk reads a real wrk --latency report: rate, latency, errors and the request count CPU per request divides by.

package bench

import (
	"testing"
	"time"
)

const wrkReport = `Running 4s test @ http://10.99.1.1:7121/obj/1024
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   812.35us  410.22us  12.40ms   91.02%
    Req/Sec    10.02k   612.31    11.20k    72.50%
  Latency Distribution
     50%  735.00us
     75%  901.00us
     90%    1.10ms
     99%    2.85ms
  79801 requests in 4.00s, 93.14MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:  19950.21
Transfer/sec:     23.28MB
`

func TestParseWrk(t *testing.T) {
	r, err := parseWrk(wrkReport)
	if err != nil {
		t.Fatal(err)
	}
	if r.rps != 19950.21 || r.p50 != 735*time.Microsecond || r.p99 != 2850*time.Microsecond || r.errors != 7 || r.requests != 79801 {
		t.Errorf("parsed %+v", r)
	}
	if _, err := parseWrk("nothing useful"); err == nil {
		t.Error("a report without figures parsed")
	}
}
