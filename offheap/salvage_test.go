//go:build linux

package offheap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
		f, err := OpenSalvage(path, nil)
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
		if f, err := OpenSalvage(path, nil); err == nil {
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
	if _, err := OpenSalvage(path, nil); !errors.Is(err, ErrNotReady) {
		t.Fatalf("OpenSalvage of an unfinished file: %v, want ErrNotReady", err)
	}
}

// TestOpenSalvageOfAFileThatGrew: with growsTo, OpenSalvage maps the
// bytes a file grew by past its recorded size (File.Growth), the file's
// where it has them and zeros past its end, up to the most it may hold;
// only bytes past that are left out. Without growsTo they are all left
// out, as for a file that may not grow.
func TestOpenSalvageOfAFileThatGrew(t *testing.T) {
	const step = 64 << 10
	const limit = testSize + 4*step
	growsTo := func([]byte) (int64, int64, int64) { return limit, testSize, step }
	path := filepath.Join(t.TempDir(), "map")
	o := createOpts()
	o.GrowsTo = growsTo
	f := mustOpen(t, path, o)
	if err := f.Grow(testSize + 2*step); err != nil {
		t.Fatal(err)
	}
	for i := range 2 * step / 4096 {
		copy(f.Growth.Bytes(int64(i)*4096, 16), fmt.Sprintf("grown page %d", i))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	orig := mustRead(t, path)
	for _, tc := range []struct {
		name                   string
		data                   []byte
		grows                  bool
		length, missing, extra int64
	}{
		{"grown", orig, true, testSize + 2*step, 0, 0},
		{"grown, cut mid-step", orig[:testSize+step+5000], true, testSize + step + 5000, 0, 0},
		{"grown, cut below its recorded size", orig[:testSize-4096], true, testSize, 4096, 0},
		{"grown to its limit and past it", append(append(bytes.Clone(orig), make([]byte, 2*step)...), "junk"...), true, limit, 0, 4},
		{"grown, read as a file that may not grow", orig, false, testSize, 0, 2 * step},
	} {
		if err := os.WriteFile(path, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		g := growsTo
		if !tc.grows {
			g = nil
		}
		f, err := OpenSalvage(path, g)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := f.Salvage()
		if f.Size() != testSize || f.Length() != tc.length || s.Length != int64(len(tc.data)) || s.Missing != tc.missing || s.Extra != tc.extra || s.HeaderLost != nil || !f.ReadOnly() {
			t.Fatalf("%s: size %d, length %d, %+v", tc.name, f.Size(), f.Length(), s)
		}
		if !tc.grows {
			if f.Growth != nil {
				t.Fatalf("%s: a growth mapping", tc.name)
			}
			f.Close()
			continue
		}
		if f.Growth == nil || f.Growth.Len() != limit-testSize || !f.Growth.ReadOnly() {
			t.Fatalf("%s: growth mapping %v", tc.name, f.Growth)
		}
		n := max(0, min(int64(len(tc.data)), limit)-testSize)
		if !bytes.Equal(f.Growth.Bytes(0, n), tc.data[testSize:testSize+n]) || !allZero(f.Growth.Bytes(n, f.Growth.Len()-n)) {
			t.Fatalf("%s: the growth mapping does not read the file's bytes, then zeros", tc.name)
		}
		f.Close()
		if now := mustRead(t, path); !bytes.Equal(now, tc.data) {
			t.Fatalf("%s: OpenSalvage wrote the file", tc.name)
		}
	}
}
