// The iprate experiment's client process: loadgen's connect/send/close from the client namespace, apart from the bench process and its origin, so each side's CPU is its own.

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/splicer/splicer/loadgen"
)

// IPRateClientCommand is the splicer-bench command that runs IPRateClient.
const IPRateClientCommand = "iprate-client"

// iprateReport is what an iprate client process writes at its end.
type iprateReport struct {
	Conns, Errors      int64
	Elapsed            time.Duration
	P50, P99, Max      time.Duration
	FirstErr           string
	UserCPU, SystemCPU time.Duration // the process's own, getrusage
}

// IPRateClient runs loadgen.Connect in the namespace it was started in,
// by args ADDR SIZE CONNS DURATION SRC[,SRC...]: CONNS clients for
// DURATION, each connection SIZE bytes each way to ADDR, from the SRC
// addresses in turn (the port chosen at connect). It writes what it
// measured and its CPU time as JSON to out.
func IPRateClient(args []string, out io.Writer) error {
	if len(args) != 5 {
		return errors.New("iprate-client: ADDR SIZE CONNS DURATION SRC[,SRC...]")
	}
	size, err1 := strconv.Atoi(args[1])
	conns, err2 := strconv.Atoi(args[2])
	dur, err3 := time.ParseDuration(args[3])
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("iprate-client: %w", err)
	}
	var srcs []netip.Addr
	for _, s := range strings.Split(args[4], ",") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("iprate-client: %w", err)
		}
		srcs = append(srcs, a)
	}
	r, err := loadgen.Connect(context.Background(), fromSources(srcs), args[0], size, conns, dur)
	if err != nil {
		return err
	}
	rep := iprateReport{Conns: r.Conns, Errors: r.Errors, Elapsed: r.Elapsed, P50: r.P50, P99: r.P99, Max: r.Max}
	if r.FirstErr != nil {
		rep.FirstErr = r.FirstErr.Error()
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		rep.UserCPU, rep.SystemCPU = time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
	}
	return json.NewEncoder(out).Encode(rep)
}

// fromSources dials from srcs in turn.
func fromSources(srcs []netip.Addr) loadgen.DialFunc {
	var next atomic.Uint64
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return loadgen.SourceDialer(srcs[next.Add(1)%uint64(len(srcs))]).DialContext(ctx, network, addr)
	}
}

// result is the report as loadgen's.
func (r iprateReport) result() loadgen.ConnectResult {
	res := loadgen.ConnectResult{Conns: r.Conns, Errors: r.Errors, Elapsed: r.Elapsed, P50: r.P50, P99: r.P99, Max: r.Max}
	if r.Elapsed > 0 {
		res.CPS = float64(r.Conns) / r.Elapsed.Seconds()
	}
	if r.FirstErr != "" {
		res.FirstErr = errors.New(r.FirstErr)
	}
	return res
}
