package offheap

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestHeaderLayout holds the byte map in layout.go to the code: the fields
// tile a copy with no gap or overlap, every word is aligned to its size,
// the two copies tile the page, and encodeHeader puts each value at its
// documented offset in both.
func TestHeaderLayout(t *testing.T) {
	h := header{version: FormatVersion, state: stateReady, fileSize: 1 << 20, dataOffset: HeaderSize,
		created: 0x1122334455667788, pid: 4242, layout: []byte("the layout")}
	page := make([]byte, HeaderSize)
	encodeHeader(page, &h)
	le := binary.LittleEndian
	if copyA != 0 || copyB != headerCopySize || 2*headerCopySize != HeaderSize {
		t.Fatalf("copies at %d and %d of %d bytes do not tile the %d-byte page", copyA, copyB, headerCopySize, HeaderSize)
	}
	for _, at := range []int{copyA, copyB} {
		c := page[at : at+headerCopySize]
		fields := []struct {
			name      string
			off, size int
			want      uint64 // for integer fields
		}{
			{"magic", hdrMagic, 8, le.Uint64([]byte(magic))},
			{"version", hdrVersion, 4, FormatVersion},
			{"endian", hdrEndian, 4, endianMark},
			{"state", hdrState, 4, stateReady},
			{"headerSize", hdrHeaderSize, 4, HeaderSize},
			{"fileSize", hdrFileSize, 8, 1 << 20},
			{"dataOffset", hdrDataOffset, 8, HeaderSize},
			{"createdNano", hdrCreated, 8, 0x1122334455667788},
			{"creatorPID", hdrPID, 4, 4242},
			{"layoutLen", hdrLayoutLen, 4, uint64(len(h.layout))},
			{"checksum", hdrChecksum, 8, copyChecksum(c, len(h.layout))},
			{"reserved", hdrReserved, 960, 0},
			{"layout", hdrLayout, MaxLayoutSize, 0},
		}
		next := 0
		for _, f := range fields {
			if f.off != next {
				t.Errorf("%s at offset %d, want %d (gap or overlap)", f.name, f.off, next)
			}
			next = f.off + f.size
			switch f.size {
			case 4:
				if (at+f.off)%4 != 0 {
					t.Errorf("%s at %d is not 4-aligned", f.name, at+f.off)
				}
				if got := uint64(le.Uint32(c[f.off:])); got != f.want {
					t.Errorf("%s = %#x, want %#x", f.name, got, f.want)
				}
			case 8:
				if (at+f.off)%8 != 0 {
					t.Errorf("%s at %d is not 8-aligned", f.name, at+f.off)
				}
				if got := le.Uint64(c[f.off:]); got != f.want {
					t.Errorf("%s = %#x, want %#x", f.name, got, f.want)
				}
			}
		}
		if next != headerCopySize {
			t.Errorf("fields end at %d, want %d", next, headerCopySize)
		}
		if got := string(c[hdrLayout : hdrLayout+len(h.layout)]); got != "the layout" {
			t.Errorf("layout bytes = %q", got)
		}
		if !allZero(c[hdrReserved:hdrLayout]) || !allZero(c[hdrLayout+len(h.layout):]) {
			t.Error("reserved bytes or the layout's tail are not zero")
		}
	}
	if MaxLayoutSize != 1024 || maxLayoutSizeV1 != 3072 {
		t.Errorf("MaxLayoutSize = %d, want 1024; version 1's %d, want 3072", MaxLayoutSize, maxLayoutSizeV1)
	}
	if !bytes.Equal(page[copyA:copyB], page[copyB:]) {
		t.Error("the two copies differ")
	}
}

// TestStateValues: the states must be far apart, because Create wipes a
// file whose state is not ready.
func TestStateValues(t *testing.T) {
	dist := func(a, b uint32) int {
		n := 0
		for x := a ^ b; x != 0; x &= x - 1 {
			n++
		}
		return n
	}
	for _, p := range [][2]uint32{{stateNone, stateInitializing}, {stateNone, stateReady}, {stateInitializing, stateReady}} {
		if d := dist(p[0], p[1]); d < 16 {
			t.Errorf("states %#x and %#x differ in %d bits, want at least 16", p[0], p[1], d)
		}
	}
}
