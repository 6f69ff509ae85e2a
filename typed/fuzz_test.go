//go:build linux

package typed

import (
	"bytes"
	"errors"
	"math"
	"testing"
	"time"
)

// checkDecode feeds b to c.Decode: a failure must match ErrDecode (a panic
// fails the fuzz run by itself). When Decode succeeds, the value must
// encode and decode again to the same value (eq), and, when exact is true
// (codecs with one encoding per value), re-encode to b itself.
func checkDecode[T any](t *testing.T, name string, c Codec[T], b []byte, exact bool, eq func(a, b T) bool) {
	t.Helper()
	in := append([]byte(nil), b...)
	v, err := c.Decode(in)
	if !bytes.Equal(in, b) {
		t.Fatalf("%s: Decode modified its input", name)
	}
	if err != nil {
		if !errors.Is(err, ErrDecode) {
			t.Fatalf("%s: Decode(%x): %v does not match ErrDecode", name, b, err)
		}
		return
	}
	clear(in) // Decode must not have kept its input
	enc, err := c.Append(nil, v)
	if err != nil {
		t.Fatalf("%s: Append of the decoded %v: %v", name, v, err)
	}
	if exact && !bytes.Equal(enc, b) {
		t.Fatalf("%s: decode then encode of %x gave %x", name, b, enc)
	}
	v2, err := c.Decode(enc)
	if err != nil || !eq(v, v2) {
		t.Fatalf("%s: second round trip of %x: %v, %v; want %v", name, b, v2, err, v)
	}
}

func FuzzCodecs(f *testing.F) {
	for _, s := range []string{"", "\x00", "\x01", "\x02", "ab", "abcd", "12345678", "123456789",
		`{"name":"x","tags":["a"],"attrs":{"k":"v"},"score":1e300}`, `null`, `{"age":1.5}`} {
		f.Add([]byte(s))
	}
	if tb, err := time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("", 3600)).MarshalBinary(); err == nil {
		f.Add(tb)
	}
	sameBits := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, "String", String(), b, true, equal)
		checkDecode(t, "Bytes", Bytes(), b, true, bytes.Equal)
		checkDecode(t, "Int64", Int64(), b, true, equal)
		checkDecode(t, "Uint64", Uint64(), b, true, equal)
		checkDecode(t, "Int32", Int32(), b, true, equal)
		checkDecode(t, "Uint32", Uint32(), b, true, equal)
		checkDecode(t, "Int16", Int16(), b, true, equal)
		checkDecode(t, "Uint16", Uint16(), b, true, equal)
		checkDecode(t, "Int8", Int8(), b, true, equal)
		checkDecode(t, "Uint8", Uint8(), b, true, equal)
		checkDecode(t, "Float64", Float64(), b, true, sameBits)
		checkDecode(t, "Bool", Bool(), b, true, equal)
		checkDecode(t, "Binary[point]", Binary[point](), b, true, equal)
		checkDecode(t, "Binary[time.Time]", Binary[time.Time](), b, false, func(x, y time.Time) bool { return x.Equal(y) })
		// JSON is lossy for Go values (omitempty turns an empty map into a
		// nil one), so compare what the values encode to.
		checkDecode(t, "JSON[record]", JSON[record](), b, false, func(x, y record) bool {
			ex, _ := JSON[record]().Append(nil, x)
			ey, _ := JSON[record]().Append(nil, y)
			return bytes.Equal(ex, ey)
		})
	})
}
