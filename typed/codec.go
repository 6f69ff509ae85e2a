package typed

import (
	"encoding/binary"
	"errors"
	"math"
)

// Codec turns values of T into the bytes the map stores and back. The
// same codec must be used by every process that opens the map: the file
// holds only bytes, with no record of their type.
//
// Append encodes v at the end of dst and returns the extended slice, so a
// caller that reuses dst encodes without allocating. It must not modify
// dst[:len(dst)] and, on error, should return dst unchanged.
//
// Decode must not keep b or anything that aliases it after it returns: the
// Map decodes out of buffers that it reuses for the next call. A failure
// to decode should return an error matching ErrDecode (a *DecodeError
// does), and never panic, whatever b holds: b comes from a file any
// process can write.
//
// A key codec must also be deterministic and injective: equal keys must
// encode to equal bytes, or a Get will not find what a Put stored.
type Codec[T any] interface {
	Append(dst []byte, v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// String stores a string's bytes as they are, so keys and values written
// through it are the same bytes the raw hashmap API sees ([]byte(s)), and
// typed and untyped users of one map interoperate. Decode accepts any
// bytes (Go strings need not be UTF-8) and allocates the string, except an
// empty one.
func String() Codec[string] { return stringCodec{} }

type stringCodec struct{}

func (stringCodec) Append(dst []byte, v string) ([]byte, error) { return append(dst, v...), nil }
func (stringCodec) Decode(b []byte) (string, error)             { return string(b), nil }

// Bytes stores a slice's bytes as they are. A nil slice and an empty one
// both encode to nothing; Decode returns a non-nil empty slice for both, so
// a found value is never nil. Otherwise Decode returns a copy the caller
// owns (but see NewCached: a near-cache's values are shared).
func Bytes() Codec[[]byte] { return bytesCodec{} }

type bytesCodec struct{}

func (bytesCodec) Append(dst []byte, v []byte) ([]byte, error) { return append(dst, v...), nil }
func (bytesCodec) Decode(b []byte) ([]byte, error) {
	return append([]byte{}, b...), nil
}

// fixed is the codec of a fixed-width number: one generic type rather than
// ten copies of the length check. put and get see exactly size bytes.
type fixed[T any] struct {
	name string
	size int
	put  func(dst []byte, v T) []byte
	get  func(b []byte) T
}

func (c fixed[T]) Append(dst []byte, v T) ([]byte, error) { return c.put(dst, v), nil }

func (c fixed[T]) Decode(b []byte) (T, error) {
	if len(b) != c.size {
		var zero T
		return zero, &DecodeError{Type: c.name, Len: len(b), Want: c.size}
	}
	return c.get(b), nil
}

// The fixed-width codecs are built once: boxing them into a Codec
// interface on every call would allocate.
var (
	le = binary.LittleEndian

	int64Codec Codec[int64] = fixed[int64]{"int64", 8,
		func(d []byte, v int64) []byte { return le.AppendUint64(d, uint64(v)) },
		func(b []byte) int64 { return int64(le.Uint64(b)) }}
	uint64Codec Codec[uint64] = fixed[uint64]{"uint64", 8, le.AppendUint64, le.Uint64}
	int32Codec  Codec[int32]  = fixed[int32]{"int32", 4,
		func(d []byte, v int32) []byte { return le.AppendUint32(d, uint32(v)) },
		func(b []byte) int32 { return int32(le.Uint32(b)) }}
	uint32Codec Codec[uint32] = fixed[uint32]{"uint32", 4, le.AppendUint32, le.Uint32}
	int16Codec  Codec[int16]  = fixed[int16]{"int16", 2,
		func(d []byte, v int16) []byte { return le.AppendUint16(d, uint16(v)) },
		func(b []byte) int16 { return int16(le.Uint16(b)) }}
	uint16Codec Codec[uint16] = fixed[uint16]{"uint16", 2, le.AppendUint16, le.Uint16}
	int8Codec   Codec[int8]   = fixed[int8]{"int8", 1,
		func(d []byte, v int8) []byte { return append(d, byte(v)) },
		func(b []byte) int8 { return int8(b[0]) }}
	uint8Codec Codec[uint8] = fixed[uint8]{"uint8", 1,
		func(d []byte, v uint8) []byte { return append(d, v) },
		func(b []byte) uint8 { return b[0] }}
	float64Codec Codec[float64] = fixed[float64]{"float64", 8,
		func(d []byte, v float64) []byte { return le.AppendUint64(d, math.Float64bits(v)) },
		func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) }}
)

// Int64 stores an int64 as 8 little-endian bytes (two's complement): the
// same bytes on every platform, and a plain store on amd64 and arm64,
// which are little-endian. The order of encoded keys says nothing about the order of the
// numbers; the map has no order anyway. Decode of any length but 8 fails
// with a *DecodeError.
func Int64() Codec[int64] { return int64Codec }

// Uint64 is Int64 for uint64.
func Uint64() Codec[uint64] { return uint64Codec }

// Int32 is Int64 for int32, in 4 bytes.
func Int32() Codec[int32] { return int32Codec }

// Uint32 is Int64 for uint32, in 4 bytes.
func Uint32() Codec[uint32] { return uint32Codec }

// Int16 is Int64 for int16, in 2 bytes.
func Int16() Codec[int16] { return int16Codec }

// Uint16 is Int64 for uint16, in 2 bytes.
func Uint16() Codec[uint16] { return uint16Codec }

// Int8 is Int64 for int8, in 1 byte.
func Int8() Codec[int8] { return int8Codec }

// Uint8 is Int64 for uint8, in 1 byte.
func Uint8() Codec[uint8] { return uint8Codec }

// Float64 stores the IEEE 754 bits (math.Float64bits) as 8 little-endian
// bytes, so a value comes back bit for bit (NaN payloads, -0). As keys,
// unlike a Go map's, they compare as bytes: 0 and -0 are two keys, and a NaN
// key is found by a NaN with the same bits. Canonicalize keys first if that
// is not what you want.
func Float64() Codec[float64] { return float64Codec }

// Bool stores false as 0 and true as 1, in one byte. Decode rejects any
// other byte rather than reading it as true, so that each stored byte has
// one meaning and a value written by another codec is noticed.
func Bool() Codec[bool] { return boolCodec{} }

type boolCodec struct{}

// errNotBool is static so that a bad byte costs one allocation (the
// DecodeError), not two.
var errNotBool = errors.New("byte is neither 0 nor 1")

func (boolCodec) Append(dst []byte, v bool) ([]byte, error) {
	if v {
		return append(dst, 1), nil
	}
	return append(dst, 0), nil
}

func (boolCodec) Decode(b []byte) (bool, error) {
	if len(b) != 1 {
		return false, &DecodeError{Type: "bool", Len: len(b), Want: 1}
	}
	switch b[0] {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, &DecodeError{Type: "bool", Len: 1, Want: 1, Err: errNotBool}
}
