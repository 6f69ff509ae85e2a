package rediscache

import "encoding/binary"

// Each cached key's map value is a 16-byte header, then the Redis value:
// epoch u64 LE | kind | 7 zero bytes.
const headerSize = 16

const (
	kindValue    = 1 // the Redis value follows
	kindNegative = 2 // the key is absent in Redis
)

func appendHeader(dst []byte, epoch uint64, kind byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, epoch)
	return append(dst, kind, 0, 0, 0, 0, 0, 0, 0)
}

// parseHeader returns an entry's epoch and kind; ok is false for bytes
// that are no entry of this package.
func parseHeader(b []byte) (epoch uint64, kind byte, ok bool) {
	if len(b) < headerSize || (b[8] != kindValue && b[8] != kindNegative) {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(b), b[8], true
}
