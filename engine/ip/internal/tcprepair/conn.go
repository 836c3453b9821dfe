// ConnParams: what splicing needs from one of the forwarder's frozen sockets.

package tcprepair

import "net/netip"

// ConnParams describes one of the forwarder's two sockets of a pair, as
// TCP_INFO and TCP_REPAIR report it once the socket is frozen.
type ConnParams struct {
	// Local is the forwarder's address and port, Remote the peer's.
	Local, Remote netip.AddrPort
	// Ifindex is the device the connection's packets leave through.
	Ifindex int
	// WScale: window scaling was negotiated (TCPI_OPT_WSCALE). SndWScale is
	// the peer's shift, applied to windows the peer sends
	// (tcpi_snd_wscale); RcvWScale the forwarder's, applied by the peer to
	// windows the forwarder sends (tcpi_rcv_wscale).
	WScale               bool
	SndWScale, RcvWScale uint8
	// Timestamps, SACK and ECN: negotiated (TCPI_OPT_TIMESTAMPS,
	// TCPI_OPT_SACK, TCPI_OPT_ECN).
	Timestamps, SACK, ECN bool
	// Signed: segments carry TCP-MD5 or TCP-AO signatures; MPTCP: the
	// connection is an MPTCP subflow.
	Signed, MPTCP bool
	// AdvMSS is the MSS the forwarder advertised, PeerMSS the one the peer
	// advertised; 0 if unknown.
	AdvMSS, PeerMSS uint16
	// WriteSeq, RcvNxt and SndUna are the socket's sequence numbers
	// (TCP_QUEUE_SEQ of the send and receive queues, and snd_una), after
	// the forwarder appended everything it still owes the peer.
	WriteSeq, RcvNxt, SndUna uint32
	// TSVal is the socket's timestamp clock now (TCP_TIMESTAMP); PeerTSVal
	// the peer's latest TSval, e.g. from DirStats.TSLast of a held pair.
	TSVal, PeerTSVal uint32
}
