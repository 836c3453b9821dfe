// The stream protocol and its client, StreamCheck: both directions of a connection verified byte for byte.

package origin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The stream protocol:
//
//	client -> server: uploadLen uint64 BE, downloadLen uint64 BE, then
//	                  uploadLen bytes of the upload pattern, then FIN
//	server -> client: downloadLen bytes of the download pattern, then the
//	                  32-byte sha256 of the uploadLen bytes it received, then FIN
//
// The server reads and writes concurrently, so neither direction waits for
// the other and a forwarder sees both at full rate. The digest goes last
// because it needs the whole upload; the client checks the download against
// the pattern as it arrives and the upload against its own digest.
const (
	streamHeaderLen = 16
	streamDigestLen = sha256.Size
	// maxStreamLen keeps lengths within int64 with room to add.
	maxStreamLen = 1 << 60
	streamChunk  = 64 << 10
)

// ErrMismatch is wrapped by StreamCheck's error when bytes arrived changed.
var ErrMismatch = errors.New("origin: stream data mismatch")

// serveStream serves one stream-protocol connection.
func serveStream(conn net.Conn, c *counters) error {
	var hdr [streamHeaderLen]byte
	n, err := io.ReadFull(conn, hdr[:])
	c.in.Add(int64(n))
	if err != nil {
		return fmt.Errorf("stream header: %w", err)
	}
	up, down := binary.BigEndian.Uint64(hdr[:8]), binary.BigEndian.Uint64(hdr[8:])
	if up > maxStreamLen || down > maxStreamLen {
		return fmt.Errorf("stream lengths %d/%d over %d", up, down, uint64(maxStreamLen))
	}

	type upload struct {
		sum [32]byte
		err error
	}
	uploaded := make(chan upload, 1)
	go func() {
		sum, err := hashUpload(conn, int64(up), c)
		uploaded <- upload{sum, err}
	}()

	if err := writePattern(conn, patternFor(seedStreamDown, int64(down)), int64(down), c); err != nil {
		conn.Close() // unblocks the upload reader
		<-uploaded
		return fmt.Errorf("stream download: %w", err)
	}
	u := <-uploaded
	if u.err != nil {
		return fmt.Errorf("stream upload: %w", u.err)
	}
	w, err := conn.Write(u.sum[:])
	c.out.Add(int64(w))
	if err != nil {
		return err
	}
	if err := closeWrite(conn); err != nil {
		return err
	}
	// Wait for the client's FIN: closing with its bytes unread would reset.
	drained, err := io.Copy(io.Discard, conn)
	c.in.Add(drained)
	return err
}

// hashUpload reads exactly n bytes from conn and returns their sha256.
func hashUpload(conn net.Conn, n int64, c *counters) ([32]byte, error) {
	h := sha256.New()
	buf := make([]byte, streamChunk)
	for n > 0 {
		r, err := conn.Read(buf[:min(int64(len(buf)), n)])
		c.in.Add(int64(r))
		h.Write(buf[:r])
		n -= int64(r)
		if err == io.EOF && n > 0 {
			return [32]byte{}, io.ErrUnexpectedEOF
		}
		if err != nil && n > 0 {
			return [32]byte{}, err
		}
	}
	return [32]byte(h.Sum(nil)), nil
}

// writePattern writes bytes [0, n) of p to conn. c may be nil.
func writePattern(conn net.Conn, p pattern, n int64, c *counters) error {
	buf := make([]byte, min(n, streamChunk))
	for off := int64(0); off < n; {
		chunk := buf[:min(int64(len(buf)), n-off)]
		p.fill(chunk, off)
		w, err := conn.Write(chunk)
		if c != nil {
			c.out.Add(int64(w))
		}
		if err != nil {
			return err
		}
		off += int64(len(chunk))
	}
	return nil
}

// StreamReport is what StreamCheck saw.
type StreamReport struct {
	Uploaded     int64 // pattern bytes sent
	Downloaded   int64 // pattern bytes received, not counting the digest
	UploadOK     bool  // the server's digest of what it received matches what was sent
	DownloadOK   bool  // every received byte matched the download pattern
	FirstBadByte int64 // offset of the first wrong download byte, or -1
	Elapsed      time.Duration
}

// OK reports whether both directions arrived intact.
func (r StreamReport) OK() bool { return r.UploadOK && r.DownloadOK }

// StreamCheck runs the stream protocol on conn, which must lead to an origin
// stream listener: it uploads up pattern bytes while downloading down
// pattern bytes and checking each as it arrives, then checks the server's
// digest of the upload. A corrupted byte either way returns the full report
// and an error wrapping ErrMismatch; a short or cut stream returns an I/O
// error. The caller keeps conn and closes it; StreamCheck half-closes it
// after the upload when conn supports CloseWrite, and may leave a deadline
// set on it when ctx ends the check.
func StreamCheck(ctx context.Context, conn net.Conn, up, down int64) (StreamReport, error) {
	rep := StreamReport{FirstBadByte: -1}
	if up < 0 || down < 0 || up > maxStreamLen || down > maxStreamLen {
		return rep, fmt.Errorf("origin: stream lengths %d/%d out of range", up, down)
	}
	start := time.Now()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var hdr [streamHeaderLen]byte
	binary.BigEndian.PutUint64(hdr[:8], uint64(up))
	binary.BigEndian.PutUint64(hdr[8:], uint64(down))
	if _, err := conn.Write(hdr[:]); err != nil {
		return rep, ctxOr(ctx, fmt.Errorf("stream header: %w", err))
	}

	type upload struct {
		sum [32]byte
		err error
	}
	uploaded := make(chan upload, 1)
	go func() {
		sum, err := sendUpload(conn, up)
		uploaded <- upload{sum, err}
	}()

	serverSum, err := rep.readDownload(conn, down)
	rep.Elapsed = time.Since(start)
	if err != nil {
		conn.SetDeadline(time.Unix(1, 0)) // unblocks the uploader
		<-uploaded
		return rep, ctxOr(ctx, err)
	}
	u := <-uploaded
	rep.Elapsed = time.Since(start)
	if u.err != nil {
		return rep, ctxOr(ctx, fmt.Errorf("stream upload: %w", u.err))
	}
	rep.Uploaded = up
	rep.UploadOK = serverSum == u.sum
	if !rep.OK() {
		return rep, fmt.Errorf("%w: upload ok=%v, download ok=%v (first bad byte %d)",
			ErrMismatch, rep.UploadOK, rep.DownloadOK, rep.FirstBadByte)
	}
	return rep, nil
}

// sendUpload writes n upload-pattern bytes, hashing them, then half-closes.
func sendUpload(conn net.Conn, n int64) ([32]byte, error) {
	h := sha256.New()
	p := patternFor(seedStreamUp, n)
	buf := make([]byte, min(n, streamChunk))
	for off := int64(0); off < n; {
		chunk := buf[:min(int64(len(buf)), n-off)]
		p.fill(chunk, off)
		h.Write(chunk)
		if _, err := conn.Write(chunk); err != nil {
			return [32]byte{}, err
		}
		off += int64(len(chunk))
	}
	return [32]byte(h.Sum(nil)), closeWrite(conn)
}

// readDownload reads n download-pattern bytes, comparing each chunk with the
// pattern and recording the first difference, then the server's digest and
// its FIN. It returns the digest.
func (r *StreamReport) readDownload(conn net.Conn, n int64) ([32]byte, error) {
	p := patternFor(seedStreamDown, n)
	got := make([]byte, streamChunk)
	want := make([]byte, streamChunk)
	r.DownloadOK = true
	for r.Downloaded < n {
		k, err := conn.Read(got[:min(int64(len(got)), n-r.Downloaded)])
		if k > 0 {
			p.fill(want[:k], r.Downloaded)
			if r.DownloadOK && !bytes.Equal(got[:k], want[:k]) {
				r.DownloadOK = false
				r.FirstBadByte = r.Downloaded + int64(firstDiff(got[:k], want[:k]))
			}
			r.Downloaded += int64(k)
		}
		if err == io.EOF && r.Downloaded < n {
			return [32]byte{}, fmt.Errorf("stream download: EOF after %d of %d bytes", r.Downloaded, n)
		}
		if err != nil && r.Downloaded < n {
			return [32]byte{}, fmt.Errorf("stream download after %d of %d bytes: %w", r.Downloaded, n, err)
		}
	}
	var sum [32]byte
	if _, err := io.ReadFull(conn, sum[:]); err != nil {
		return sum, fmt.Errorf("stream digest: %w", err)
	}
	var extra [1]byte
	k, err := conn.Read(extra[:])
	if k > 0 {
		return sum, fmt.Errorf("stream: bytes after the digest")
	}
	if err != io.EOF {
		return sum, fmt.Errorf("stream: waiting for FIN after the digest: %w", err)
	}
	return sum, nil
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// ctxOr returns ctx's error when ctx ended, since that is why err happened.
func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}
