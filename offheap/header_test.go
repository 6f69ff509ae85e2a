package offheap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func validHeader() header {
	return header{version: FormatVersion, state: stateReady, fileSize: 1 << 20, dataOffset: HeaderSize,
		created: 1700000000123456789, pid: 77, layout: []byte("segments=4")}
}

func validPage(t testing.TB) ([]byte, header) {
	h := validHeader()
	page := make([]byte, HeaderSize)
	encodeHeader(page, &h)
	return page, h
}

// reseal recomputes the checksum of copy i (0 or 1) after a deliberate
// change, to reach the checks that come after it.
func reseal(page []byte, i int) []byte {
	c := page[i*headerCopySize : (i+1)*headerCopySize]
	n := min(int(binary.LittleEndian.Uint32(c[hdrLayoutLen:])), MaxLayoutSize)
	binary.LittleEndian.PutUint64(c[hdrChecksum:], copyChecksum(c, n))
	return page
}

// bothCopies applies fn to each copy of a version-2 page (fn sees the
// copy's bytes, offsets from its start) and reseals neither.
func bothCopies(fn func(c []byte)) func(p []byte) {
	return func(p []byte) {
		fn(p[copyA : copyA+headerCopySize])
		fn(p[copyB : copyB+headerCopySize])
	}
}

// encodeV1 writes h as a version-1 header page, as builds before the two
// copies did: one copy filling the page, the checksum over all of it.
func encodeV1(page []byte, h *header) {
	le := binary.LittleEndian
	clear(page)
	copy(page[hdrMagic:], magic)
	le.PutUint32(page[hdrVersion:], 1)
	binary.NativeEndian.PutUint32(page[hdrEndian:], endianMark)
	le.PutUint32(page[hdrState:], h.state)
	le.PutUint32(page[hdrHeaderSize:], HeaderSize)
	le.PutUint64(page[hdrFileSize:], uint64(h.fileSize))
	le.PutUint64(page[hdrDataOffset:], uint64(h.dataOffset))
	le.PutUint64(page[hdrCreated:], uint64(h.created))
	le.PutUint32(page[hdrPID:], h.pid)
	le.PutUint32(page[hdrLayoutLen:], uint32(len(h.layout)))
	copy(page[hdrLayout:], h.layout)
	le.PutUint64(page[hdrChecksum:], headerChecksumV1(page))
}

func sameHeader(a, b header) bool { return a.state == b.state && a.same(&b) }

func TestDecodeHeader(t *testing.T) {
	good, want := validPage(t)
	got, faults, err := decodeHeader(good)
	if err != nil || len(faults) != 0 {
		t.Fatal(err, faults)
	}
	if !sameHeader(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	// A longer slice (a whole file) decodes the same.
	if _, _, err := decodeHeader(append(bytes.Clone(good), 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	edit := func(fns ...func(p []byte)) []byte {
		p := bytes.Clone(good)
		for _, fn := range fns {
			fn(p)
		}
		return p
	}
	resealBoth := func(p []byte) { reseal(p, 0); reseal(p, 1) }
	for _, tc := range []struct {
		name string
		page []byte
		want error
	}{
		{"nil", nil, ErrTruncated},
		{"magic prefix", []byte("SHRD"), ErrTruncated},
		{"foreign prefix", []byte("PK"), ErrNotSharedMap},
		{"text", []byte("#!/bin/sh\necho hello\n"), ErrNotSharedMap},
		{"short", good[:hdrLayout], ErrTruncated},
		{"short, copy B cut", good[:copyB+10], ErrTruncated},
		{"big-endian writer", edit(bothCopies(func(c []byte) { binary.BigEndian.PutUint32(c[hdrEndian:], endianMark) })), ErrEndianness},
		{"newer version", edit(bothCopies(func(c []byte) { le.PutUint32(c[hdrVersion:], FormatVersion+1) })), ErrVersion},
		{"newer version in A, B damaged", edit(func(p []byte) { le.PutUint32(p[hdrVersion:], FormatVersion+1); p[copyB+hdrLayout] ^= 1 }), ErrVersion},
		{"version 0", edit(bothCopies(func(c []byte) { le.PutUint32(c[hdrVersion:], 0) })), ErrCorrupt},
		{"initializing", edit(bothCopies(func(c []byte) { le.PutUint32(c[hdrState:], stateInitializing) })), ErrNotReady},
		{"state none", edit(bothCopies(func(c []byte) { le.PutUint32(c[hdrState:], stateNone) })), ErrNotReady},
		{"initializing, copy B torn to zeros", edit(func(p []byte) { le.PutUint32(p[hdrState:], stateInitializing); clear(p[copyB:]) }), ErrNotReady},
		{"initializing, copy A torn to zeros", edit(func(p []byte) { le.PutUint32(p[copyB+hdrState:], stateInitializing); clear(p[:copyB]) }), ErrNotReady},
		{"initializing beside damage", edit(func(p []byte) { le.PutUint32(p[hdrState:], stateInitializing); p[copyB+hdrLayout] ^= 1 }), ErrChecksum},
		{"state bit flips", edit(bothCopies(func(c []byte) { c[hdrState] ^= 4 })), ErrCorrupt},
		{"checksums", edit(bothCopies(func(c []byte) { c[hdrChecksum+3] ^= 1 })), ErrChecksum},
		{"size bytes", edit(bothCopies(func(c []byte) { c[hdrFileSize+2] ^= 1 })), ErrChecksum},
		{"layout bytes", edit(bothCopies(func(c []byte) { c[hdrLayout] ^= 0x20 })), ErrChecksum},
		{"header sizes", edit(bothCopies(func(c []byte) { le.PutUint32(c[hdrHeaderSize:], 8192) }), resealBoth), ErrCorrupt},
		{"data offsets", edit(bothCopies(func(c []byte) { le.PutUint64(c[hdrDataOffset:], 0) }), resealBoth), ErrCorrupt},
		{"file sizes", edit(bothCopies(func(c []byte) { le.PutUint64(c[hdrFileSize:], 1<<63) }), resealBoth), ErrCorrupt},
		{"layout lengths", edit(bothCopies(func(c []byte) { le.PutUint32(c[hdrLayoutLen:], MaxLayoutSize+1) })), ErrCorrupt},
		{"two sound copies that differ", edit(func(p []byte) { p[copyB+hdrCreated] ^= 1; reseal(p, 1) }), ErrCorrupt},
	} {
		if _, _, err := decodeHeader(tc.page); !errors.Is(err, tc.want) {
			t.Errorf("%s: decodeHeader = %v, want %v", tc.name, err, tc.want)
		} else if tc.want != ErrNotReady && errors.Is(err, ErrNotReady) {
			t.Errorf("%s: decodeHeader = %v: a damaged header must not read as unfinished", tc.name, err)
		}
	}

	// One copy damaged, the other sound: the sound one is used, and the
	// damaged one is named.
	for _, tc := range []struct {
		name string
		page []byte
		copy int
		kind faultKind
	}{
		{"A's magic", edit(func(p []byte) { p[0] = 'X' }), 0, faultDamaged},
		{"B's layout", edit(func(p []byte) { p[copyB+hdrLayout+3] ^= 0x80 }), 1, faultDamaged},
		{"A says a newer version", edit(func(p []byte) { le.PutUint32(p[hdrVersion:], FormatVersion+1) }), 0, faultDamaged},
		{"A says version 1", edit(func(p []byte) { le.PutUint32(p[hdrVersion:], 1) }), 0, faultDamaged},
		{"B's state", edit(func(p []byte) { p[copyB+hdrState+1] ^= 0x40 }), 1, faultDamaged},
		{"B left initializing", edit(func(p []byte) { le.PutUint32(p[copyB+hdrState:], stateInitializing) }), 1, faultLagging},
		{"B's layout length", edit(func(p []byte) { le.PutUint32(p[copyB+hdrLayoutLen:], 0xFFFFFFFF) }), 1, faultDamaged},
		{"A's padding", edit(func(p []byte) { p[hdrReserved+5] = 1 }), 0, faultPadding},
		{"B's layout tail", edit(func(p []byte) { p[HeaderSize-1] = 1 }), 1, faultPadding},
	} {
		got, faults, err := decodeHeader(tc.page)
		if err != nil || !sameHeader(got, want) {
			t.Errorf("%s: decodeHeader = %+v, %v; want the sound copy's header", tc.name, got, err)
			continue
		}
		if len(faults) != 1 || faults[0].copy != tc.copy || faults[0].kind != tc.kind {
			t.Errorf("%s: faults %v, want one of kind %d in copy %d", tc.name, faults, tc.kind, tc.copy)
		}
	}
}

// TestEveryBitFlipIsSurvived flips each bit of a valid header page in
// turn: the page still decodes, to the same header, with the flip named
// as a fault (the checksum leaves out only the padding and the state word,
// and a flipped state reads as neither ready nor unfinished). The same bit
// flipped in both copies of a field is caught, never read as unfinished
// (which Create would wipe) nor as another header.
func TestEveryBitFlipIsSurvived(t *testing.T) {
	good, want := validPage(t)
	p := bytes.Clone(good)
	for i := range HeaderSize {
		for bit := range 8 {
			p[i] ^= 1 << bit
			got, faults, err := decodeHeader(p)
			if err != nil || !sameHeader(got, want) {
				t.Fatalf("flipping bit %d of byte %d: %+v, %v; want the other copy's header", bit, i, got, err)
			}
			if len(faults) != 1 || faults[0].copy != i/headerCopySize {
				t.Fatalf("flipping bit %d of byte %d: faults %v, want one naming copy %c", bit, i, faults, 'A'+i/headerCopySize)
			}
			p[i] ^= 1 << bit
		}
	}
	for i := range headerCopySize {
		for bit := range 8 {
			p[copyA+i] ^= 1 << bit
			p[copyB+i] ^= 1 << bit
			got, _, err := decodeHeader(p)
			switch {
			case errors.Is(err, ErrNotReady):
				t.Fatalf("flipping bit %d of byte %d in both copies made a ready header look unfinished: %v", bit, i, err)
			case err == nil && !sameHeader(got, want):
				t.Fatalf("flipping bit %d of byte %d in both copies decoded as another header: %+v", bit, i, got)
			case err == nil && (i < hdrReserved || i >= hdrLayout && i < hdrLayout+len(want.layout)):
				t.Fatalf("flipping bit %d of byte %d in both copies went unnoticed", bit, i)
			case err != nil && i >= hdrReserved && !(i >= hdrLayout && i < hdrLayout+len(want.layout)):
				t.Fatalf("flipping bit %d of padding byte %d in both copies: %v", bit, i, err)
			}
			p[copyA+i] ^= 1 << bit
			p[copyB+i] ^= 1 << bit
		}
	}
}

// TestVersion1Header: a page written as builds before the two copies
// wrote it decodes, and is checked as they checked it: any flipped bit,
// anywhere in the page, is caught.
func TestVersion1Header(t *testing.T) {
	want := validHeader()
	want.version = 1
	want.layout = bytes.Repeat([]byte("v1 layout "), 200) // longer than a version-2 copy holds
	page := make([]byte, HeaderSize)
	encodeV1(page, &want)
	got, faults, err := decodeHeader(page)
	if err != nil || len(faults) != 0 || !sameHeader(got, want) {
		t.Fatalf("decodeHeader of a version-1 page = %+v, %v, %v", got, faults, err)
	}
	p := bytes.Clone(page)
	for i := range HeaderSize {
		p[i] ^= 0x10
		_, _, err := decodeHeader(p)
		if err == nil {
			t.Fatalf("flipping byte %d of a version-1 header went unnoticed", i)
		}
		if errors.Is(err, ErrNotReady) {
			t.Fatalf("flipping byte %d of a version-1 header made it look unfinished: %v", i, err)
		}
		p[i] ^= 0x10
	}
	binary.LittleEndian.PutUint32(p[hdrState:], stateInitializing)
	if _, _, err := decodeHeader(p); !errors.Is(err, ErrNotReady) {
		t.Fatalf("a version-1 header left initializing: %v, want ErrNotReady", err)
	}
}

// FuzzDecodeHeader feeds arbitrary bytes to decodeHeader as a header page.
// Inputs are page-sized, which makes the fuzzer's default minimization of
// each new input take up to a minute with no execs reported; run it as
//
//	go test -run='^$' -fuzz=FuzzDecodeHeader -fuzzminimizetime=1s ./offheap/
func FuzzDecodeHeader(f *testing.F) {
	good, _ := validPage(f)
	le := binary.LittleEndian
	v1h := validHeader()
	v1h.version = 1
	v1 := make([]byte, HeaderSize)
	encodeV1(v1, &v1h)
	f.Add(good)
	f.Add(v1)
	f.Add(good[:hdrLayout])
	f.Add(good[:4])
	f.Add(make([]byte, HeaderSize))
	f.Add([]byte("not a map at all"))
	for _, fn := range []func(p []byte){
		func(p []byte) { p[hdrLayout] ^= 1 },
		func(p []byte) { p[copyB+hdrLayout] ^= 1 },
		func(p []byte) { p[hdrLayout] ^= 1; p[copyB+hdrLayout] ^= 1 },
		func(p []byte) { clear(p[:copyB]) },
		func(p []byte) { clear(p[copyB:]) },
		func(p []byte) { p[hdrReserved] = 1 },
		func(p []byte) { le.PutUint32(p[hdrState:], stateInitializing) },
		func(p []byte) { le.PutUint32(p[copyB+hdrState:], stateInitializing) },
		func(p []byte) { le.PutUint32(p[hdrVersion:], FormatVersion+1) },
		func(p []byte) { le.PutUint32(p[hdrVersion:], 1) },
		func(p []byte) { binary.BigEndian.PutUint32(p[hdrEndian:], endianMark) },
		func(p []byte) { le.PutUint32(p[hdrLayoutLen:], 0xFFFFFFFF); reseal(p, 0) },
		func(p []byte) { le.PutUint64(p[copyB+hdrFileSize:], 1<<63); reseal(p, 1) },
		func(p []byte) { p[copyB+hdrCreated] ^= 1; reseal(p, 1) },
	} {
		p := bytes.Clone(good)
		fn(p)
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, faults, err := decodeHeader(b) // must not panic, whatever b is
		if err != nil {
			if len(faults) != 0 {
				t.Fatalf("faults %v with the error %v", faults, err)
			}
			return
		}
		if len(b) < HeaderSize || h.state != stateReady || h.dataOffset != HeaderSize ||
			h.fileSize <= HeaderSize || (h.version == FormatVersion && len(h.layout) > MaxLayoutSize) ||
			len(h.layout) > maxLayoutSizeV1 || (h.version != 1 && h.version != FormatVersion) {
			t.Fatalf("accepted an impossible header: %+v", h)
		}
		// What was accepted is what some copy says, whole.
		if h.version == FormatVersion {
			a, bb := decodeCopy(b[copyA:copyA+headerCopySize]), decodeCopy(b[copyB:copyB+headerCopySize])
			if !(a.kind == copySound && sameHeader(a.h, h)) && !(bb.kind == copySound && sameHeader(bb.h, h)) {
				t.Fatalf("accepted %+v, which no sound copy says", h)
			}
		}
		// It must survive a round trip.
		h.version = FormatVersion
		if len(h.layout) > MaxLayoutSize {
			return // a version-1 layout too long for version 2
		}
		p := make([]byte, HeaderSize)
		encodeHeader(p, &h)
		h2, faults, err := decodeHeader(p)
		if err != nil || len(faults) != 0 || !sameHeader(h2, h) {
			t.Fatalf("round trip of %+v: %+v, %v, %v", h, h2, faults, err)
		}
	})
}
