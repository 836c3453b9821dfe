// Decoding of ring buffer records, which the kernel writes in host byte order.

package sockmap

import "encoding/binary"

func nativeUint64(b []byte) uint64 { return binary.NativeEndian.Uint64(b) }
func nativeUint32(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }
