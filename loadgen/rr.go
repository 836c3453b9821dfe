// RR: request/response transactions on one connection, netperf TCP_RR style.

package loadgen

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// RRResult is what RR measured over its window.
type RRResult struct {
	Txns          int64         // transactions completed in the window
	Elapsed       time.Duration // length of the window
	TPS           float64       // Txns per second
	P50, P99, Max time.Duration // transaction latency, request written to response read
}

// RR ping-pongs size-byte messages on one connection to addr, an origin
// echo or an rr server of the same size: write a request, read the same
// bytes back, repeat. It runs a warm-up (WithWarmup), then counts the
// transactions that complete within dur. TCP_NODELAY is on, so each message
// leaves at once. A response that differs from its request is an error.
func RR(ctx context.Context, dial DialFunc, addr string, size int, dur time.Duration, opts ...Option) (RRResult, error) {
	var res RRResult
	if size <= 0 || dur <= 0 {
		return res, fmt.Errorf("loadgen: rr needs size > 0 and dur > 0; got %d, %v", size, dur)
	}
	cfg := newConfig(opts)
	conn, err := dial.orDefault()(ctx, "tcp", addr)
	if err != nil {
		return res, fmt.Errorf("loadgen: dial %s: %w", addr, err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		if err := tc.SetNoDelay(true); err != nil {
			return res, fmt.Errorf("loadgen: TCP_NODELAY: %w", err)
		}
	}

	measureFrom := time.Now().Add(cfg.warmup)
	end := measureFrom.Add(dur)
	// The deadline bounds the run even if a response never comes; running
	// into it at the end of the window is the normal way out.
	conn.SetDeadline(end)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req, resp := randomPayload(size), make([]byte, size)
	var lat []time.Duration
	for seq := uint64(0); ; seq++ {
		stampSeq(req, seq)
		t := time.Now()
		err := transact(conn, req, resp)
		done := time.Now()
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) || (err == nil && !done.Before(end)) {
			break
		}
		if err != nil {
			return res, fmt.Errorf("loadgen: rr transaction %d: %w", seq, err)
		}
		if !t.Before(measureFrom) {
			lat = append(lat, done.Sub(t))
		}
	}
	res.Txns = int64(len(lat))
	res.Elapsed = dur
	res.TPS = float64(res.Txns) / dur.Seconds()
	res.P50, res.P99, res.Max = latencies(lat)
	return res, nil
}

// stampSeq writes seq into the head of req, so that a stale or replayed
// response does not pass for the current one.
func stampSeq(req []byte, seq uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seq)
	copy(req, b[:])
}

// transact writes req and reads len(req) bytes into resp, which must equal it.
func transact(conn net.Conn, req, resp []byte) error {
	if _, err := conn.Write(req); err != nil {
		return err
	}
	if _, err := io.ReadFull(conn, resp); err != nil {
		return err
	}
	if !bytes.Equal(req, resp) {
		return errors.New("response differs from request")
	}
	return nil
}
