// Decoding of ring buffer records: struct event in the host layout the kernel writes and the generated struct keeps.

package sockmap

import "unsafe"

// eventSize is sizeof(struct event).
const eventSize = int(unsafe.Sizeof(spliceEvent{}))

// decodeEvent copies a record of at least eventSize bytes into its
// generated struct (structs.HostLayout: the C layout).
func decodeEvent(raw []byte) spliceEvent {
	var ev spliceEvent
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&ev)), unsafe.Sizeof(ev)), raw)
	return ev
}
