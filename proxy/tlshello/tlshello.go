// Package tlshello reads a TLS ClientHello off a client connection and keeps every byte it read, so that a proxy can pick a server by the names in it and then replay the hello to that server unchanged.
//
// A passthrough proxy must not terminate TLS: it reads the client's first
// flight, learns the server name (SNI) and the protocols offered (ALPN),
// picks a server and hands the server the very bytes the client sent, after
// which the two ends run their handshake through the proxy as through a
// router. Read does that part: it reads TLS records into a buffer until the
// ClientHello handshake message is whole (however the client's TCP
// segments and TLS records split it), parses it, and returns it with every
// byte read, which the caller writes to the server before it splices.
//
// Go's crypto/tls parses ClientHellos only inside a server handshake, which
// consumes the bytes and answers the client; it exports no parser of a raw
// hello. The parsing here is done over bytes with
// golang.org/x/crypto/cryptobyte, the length-prefixed reader crypto/tls is
// built on, which bounds every read by the prefix around it: a malformed
// length cannot read past its message.
//
// What it accepts is what a TLS 1.0 to 1.3 server accepts of a hello, no
// more: records of type handshake only, the first message a ClientHello,
// every extension at most once (crypto/tls refuses duplicates too: two
// server names could route to one server and be served by another), one
// host name in server_name, made of letters, digits, '-', '_' and dots,
// without a trailing dot. Unknown extensions, cipher suites and groups are
// skipped, which is all that GREASE values (RFC 8701) ask of a reader;
// GREASE ALPN identifiers are left out of Hello.ALPN. A hello that uses
// Encrypted Client Hello carries, in the clear, the outer name of its
// client-facing server (ECH's public_name): Read reports that name, and
// Hello.ECH, since the real name is encrypted to that server.
package tlshello

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"golang.org/x/crypto/cryptobyte"
)

// MaxBytes bounds what Read reads before the ClientHello is whole, record
// headers included: 16 KiB, the preread buffer of nginx's ssl_preread and
// HAProxy's buffer for req.ssl_sni. Browsers' hellos, post-quantum key
// shares included, take about 2 KiB.
const MaxBytes = 16 << 10

// TLS record and handshake constants (RFC 8446 sections 4 and 5).
const (
	recordHeaderLen     = 5
	recordTypeHandshake = 22
	// maxRecord is the largest plaintext record fragment (2^14).
	maxRecord            = 1 << 14
	handshakeHeaderLen   = 4
	typeClientHello      = 1
	extServerName        = 0
	extALPN              = 16
	extEncryptedHello    = 0xfe0d
	serverNameTypeHost   = 0
	maxServerNameLength  = 253
	maxSessionIDLength   = 32
	clientHelloRandomLen = 32
)

// Hello is what a ClientHello says that a proxy routes by.
type Hello struct {
	// ServerName is the host name of the server_name extension, in
	// lower case; "" when the hello names none.
	ServerName string
	// ALPN are the protocols offered, in the client's order, GREASE
	// values left out; nil without the extension.
	ALPN []string
	// ECH: the hello carries an encrypted_client_hello extension, and
	// ServerName is the outer name (the client-facing server's).
	ECH bool
}

// Error is a hello Read refuses. Reason is one of the Reason constants.
type Error struct {
	Reason string
	Detail string
}

// Reasons of an Error, as counted in metrics.
const (
	// ReasonMalformed: the bytes are not a well-formed ClientHello (not
	// TLS at all, or a hello a TLS server would refuse to parse).
	ReasonMalformed = "malformed"
	// ReasonTooLarge: the hello does not fit in MaxBytes.
	ReasonTooLarge = "too_large"
)

func (e *Error) Error() string { return "TLS ClientHello " + e.Reason + ": " + e.Detail }

func malformed(format string, args ...any) *Error {
	return &Error{Reason: ReasonMalformed, Detail: fmt.Sprintf(format, args...)}
}

// Read reads r until a whole ClientHello has arrived, and returns it
// parsed with every byte read (the hello and anything the client sent
// right after it in the same reads, such as 0-RTT data), for the caller
// to replay. A hello that is not whole within MaxBytes, or is malformed,
// gives an *Error (with the bytes read); a read error, such as the
// client closing or a deadline passing, is returned as it is. The
// caller bounds the wait with r's deadline.
//
// Each byte is looked at once however the client cuts its stream: a
// client that sends its hello a byte per segment, in 1-byte records,
// costs reads, not a scan of all it sent so far per read.
func Read(r io.Reader) (*Hello, []byte, error) {
	buf := make([]byte, 0, 2<<10)
	var sc scanner
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= MaxBytes {
				return nil, buf, &Error{Reason: ReasonTooLarge, Detail: fmt.Sprintf("not whole within %d bytes", MaxBytes)}
			}
			grown := make([]byte, len(buf), min(2*cap(buf), MaxBytes))
			buf = grown[:copy(grown, buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n > 0 {
			msg, scanErr := sc.scan(buf)
			if scanErr != nil {
				return nil, buf, scanErr
			}
			if msg != nil {
				h, perr := Parse(msg)
				return h, buf, perr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, buf, err
		}
	}
}

// Scan looks at the first bytes of a client's stream: it returns the
// ClientHello handshake message (its 4-byte header included) once the
// records in buf carry it whole, nil while more bytes are needed, or an
// *Error as soon as the bytes so far cannot begin a hello of at most
// MaxBytes. The message may span records and a record may be cut short
// at the end of buf. A message within one record is a slice of buf.
func Scan(buf []byte) ([]byte, error) {
	var sc scanner
	return sc.scan(buf)
}

// scanner is Scan over a stream that grows between calls: it remembers
// the records already whole, so that each call looks only at what came
// since.
type scanner struct {
	// off is where the first record not yet whole starts in the stream.
	off int
	// msg is the handshake bytes of the whole records before off, copied
	// out of them only when the message spans records.
	msg []byte
}

// scan is Scan of buf, the stream so far: what an earlier call saw of it
// is not looked at again.
func (sc *scanner) scan(buf []byte) ([]byte, error) {
	for {
		b := buf[sc.off:]
		if len(b) == 0 {
			return nil, nil
		}
		if b[0] != recordTypeHandshake {
			return nil, malformed("record type %d, not a handshake (22): not TLS", b[0])
		}
		if len(b) >= 2 && b[1] != 3 {
			return nil, malformed("record version %d.x, not 3.x: not TLS", b[1])
		}
		if len(b) < recordHeaderLen {
			return nil, nil
		}
		n := int(b[3])<<8 | int(b[4])
		if n == 0 || n > maxRecord {
			return nil, malformed("record length %d, want 1 to %d", n, maxRecord)
		}
		frag := b[recordHeaderLen:min(len(b), recordHeaderLen+n)]
		if msg, err := sc.whole(frag); msg != nil || err != nil {
			return msg, err
		}
		if len(frag) < n {
			return nil, nil
		}
		sc.msg = append(sc.msg, frag...)
		sc.off += recordHeaderLen + n
	}
}

// whole returns the hello once the whole records' bytes (sc.msg) and
// frag, the next record's so far, hold it; nil while they do not, or an
// error as soon as its header is not a ClientHello's of a size that
// fits.
func (sc *scanner) whole(frag []byte) ([]byte, error) {
	var hdr [handshakeHeaderLen]byte
	k := copy(hdr[:], sc.msg)
	k += copy(hdr[k:], frag)
	if k >= 1 && hdr[0] != typeClientHello {
		return nil, malformed("first handshake message of type %d, not a ClientHello (1)", hdr[0])
	}
	if k < handshakeHeaderLen {
		return nil, nil
	}
	n := handshakeHeaderLen + helloLen(hdr[:])
	if n > MaxBytes-recordHeaderLen {
		return nil, &Error{Reason: ReasonTooLarge, Detail: fmt.Sprintf("a %d-byte message, more than fits in %d bytes", n-handshakeHeaderLen, MaxBytes)}
	}
	switch {
	case len(sc.msg)+len(frag) < n:
		return nil, nil
	case len(sc.msg) == 0:
		return frag[:n], nil // in one record: no copy
	}
	return append(sc.msg, frag[:n-len(sc.msg)]...), nil
}

// helloLen is the length a handshake header (4 bytes at least) announces.
func helloLen(msg []byte) int { return int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]) }

// Parse parses a ClientHello handshake message (header included), as
// Scan returns it.
func Parse(msg []byte) (*Hello, error) {
	s := cryptobyte.String(msg)
	var typ uint8
	var body cryptobyte.String
	if !s.ReadUint8(&typ) || typ != typeClientHello || !s.ReadUint24LengthPrefixed(&body) || !s.Empty() {
		return nil, malformed("not one ClientHello message")
	}
	var version uint16
	var sessionID, suites, compression cryptobyte.String
	switch {
	case !body.ReadUint16(&version) || !body.Skip(clientHelloRandomLen):
		return nil, malformed("cut short before its session id")
	case version>>8 != 3:
		return nil, malformed("legacy version %#04x, not 3.x", version)
	case !body.ReadUint8LengthPrefixed(&sessionID) || len(sessionID) > maxSessionIDLength:
		return nil, malformed("bad session id")
	case !body.ReadUint16LengthPrefixed(&suites) || len(suites) == 0 || len(suites)%2 != 0:
		return nil, malformed("bad cipher suite list")
	case !body.ReadUint8LengthPrefixed(&compression) || len(compression) == 0:
		return nil, malformed("bad compression method list")
	}
	h := &Hello{}
	if body.Empty() {
		return h, nil // no extensions (TLS 1.2 and older)
	}
	var exts cryptobyte.String
	if !body.ReadUint16LengthPrefixed(&exts) || !body.Empty() {
		return nil, malformed("bad extension list")
	}
	return h, h.extensions(exts)
}

// extensions reads the extensions h routes by, each at most once, and
// skips the others.
func (h *Hello) extensions(exts cryptobyte.String) error {
	var seen typeSet
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return malformed("bad extension")
		}
		if !seen.add(typ) {
			return malformed("extension %d twice", typ)
		}
		var err error
		switch typ {
		case extServerName:
			h.ServerName, err = serverName(data)
		case extALPN:
			h.ALPN, err = alpn(data)
		case extEncryptedHello:
			h.ECH = true // the payload is for the client-facing server
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// typeSet is the extension types of a hello seen so far. A hello has a
// score of extensions, which a look at each before finds faster than a
// map, with no allocation; past typeSetSmall of them (a hello made to
// cost, up to some 4,000) a map takes over, to keep the cost linear.
type typeSet struct {
	small [typeSetSmall]uint16
	n     int
	large map[uint16]bool
}

// typeSetSmall is how many types typeSet holds without a map: more than
// browsers send.
const typeSetSmall = 32

// add adds typ, reporting false if it was in already.
func (s *typeSet) add(typ uint16) bool {
	if s.large != nil {
		if s.large[typ] {
			return false
		}
		s.large[typ] = true
		return true
	}
	if slices.Contains(s.small[:s.n], typ) {
		return false
	}
	if s.n < typeSetSmall {
		s.small[s.n], s.n = typ, s.n+1
		return true
	}
	s.large = make(map[uint16]bool, 2*typeSetSmall)
	for _, t := range s.small {
		s.large[t] = true
	}
	s.large[typ] = true
	return true
}

// serverName reads a server_name extension (RFC 6066 section 3): one
// host_name; other name types are skipped.
func serverName(data cryptobyte.String) (string, error) {
	var list cryptobyte.String
	if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() || list.Empty() {
		return "", malformed("bad server_name extension")
	}
	name := ""
	for !list.Empty() {
		var typ uint8
		var n cryptobyte.String
		if !list.ReadUint8(&typ) || !list.ReadUint16LengthPrefixed(&n) {
			return "", malformed("bad server_name entry")
		}
		if typ != serverNameTypeHost {
			continue
		}
		if name != "" {
			return "", malformed("two host names in server_name")
		}
		if !validName(n) {
			return "", malformed("server name %q is not a host name", string(n))
		}
		name = strings.ToLower(string(n))
	}
	return name, nil
}

// validName reports whether n is a DNS host name as a client sends it in
// SNI: labels of letters, digits, '-' and '_', 1 to 63 bytes each, no
// trailing dot (RFC 6066), at most 253 bytes.
func validName(n []byte) bool {
	if len(n) == 0 || len(n) > maxServerNameLength {
		return false
	}
	label := 0
	for _, c := range n {
		switch {
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
			if label++; label > 63 {
				return false
			}
		default:
			return false
		}
	}
	return label > 0
}

// alpn reads an application_layer_protocol_negotiation extension (RFC
// 7301 section 3.1), leaving out GREASE identifiers (RFC 8701).
func alpn(data cryptobyte.String) ([]string, error) {
	var list cryptobyte.String
	if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() || list.Empty() {
		return nil, malformed("bad ALPN extension")
	}
	protos := []string{}
	for !list.Empty() {
		var p cryptobyte.String
		if !list.ReadUint8LengthPrefixed(&p) || p.Empty() {
			return nil, malformed("bad ALPN protocol name")
		}
		if isGREASE(p) {
			continue
		}
		protos = append(protos, string(p))
	}
	return protos, nil
}

// isGREASE reports whether an ALPN identifier is one of RFC 8701's
// reserved values: two equal bytes of the form 0x?A.
func isGREASE(p []byte) bool {
	return len(p) == 2 && p[0] == p[1] && p[0]&0x0f == 0x0a
}
