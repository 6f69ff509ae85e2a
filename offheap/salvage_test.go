//go:build linux

package offheap

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// TestOpenSalvage: a file Open refuses for its size or its header is
// mapped read-only by OpenSalvage, as its header says if a copy verifies
// (a missing end reading as zeros, an extra one left out), whole if none
// does; the file is never written.
func TestOpenSalvage(t *testing.T) {
	path, orig := mapWithData(t)
	for _, tc := range []struct {
		name                 string
		data                 []byte
		size, missing, extra int64
		lost                 bool
	}{
		{"sound", orig, testSize, 0, 0, false},
		{"4 KiB cut", orig[:testSize-4096], testSize, 4096, 0, false},
		{"cut mid-page", orig[:testSize-5000], testSize, 5000, 0, false},
		{"one byte appended", append(bytes.Clone(orig), 'x'), testSize, 0, 1, false},
		{"header zeroed", append(make([]byte, HeaderSize), orig[HeaderSize:]...), testSize, 0, 0, true},
		{"header zeroed and cut", append(make([]byte, HeaderSize), orig[HeaderSize:testSize-4096]...), testSize - 4096, 0, 0, true},
	} {
		if err := os.WriteFile(path, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := OpenSalvage(path)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := f.Salvage()
		if f.Size() != tc.size || f.Len() != tc.size || s.Missing != tc.missing || s.Extra != tc.extra || (s.HeaderLost != nil) != tc.lost || !f.ReadOnly() {
			t.Fatalf("%s: size %d, mapped %d, %+v", tc.name, f.Size(), f.Len(), s)
		}
		if tc.lost != (f.Layout() == nil) {
			t.Fatalf("%s: layout %q", tc.name, f.Layout())
		}
		n := min(int64(len(tc.data)), tc.size)
		if !bytes.Equal(f.Bytes(HeaderSize, n-HeaderSize), tc.data[HeaderSize:n]) || !allZero(f.Bytes(n, tc.size-n)) {
			t.Fatalf("%s: the mapping does not read the file's bytes, then zeros", tc.name)
		}
		f.Close()
		if now := mustRead(t, path); !bytes.Equal(now, tc.data) {
			t.Fatalf("%s: OpenSalvage wrote the file", tc.name)
		}
	}
	for _, data := range [][]byte{nil, []byte(magic), orig[:HeaderSize], make([]byte, HeaderSize)} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if f, err := OpenSalvage(path); err == nil {
			f.Close()
			t.Fatalf("OpenSalvage of %d bytes with nothing after the header succeeded", len(data))
		}
	}
	unfinished := bytes.Clone(orig)
	copy(unfinished[copyA+hdrState:], []byte{0x0F, 0x0F, 0x0F, 0x0F})
	copy(unfinished[copyB+hdrState:], []byte{0x0F, 0x0F, 0x0F, 0x0F})
	if err := os.WriteFile(path, unfinished, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSalvage(path); !errors.Is(err, ErrNotReady) {
		t.Fatalf("OpenSalvage of an unfinished file: %v, want ErrNotReady", err)
	}
}
