package offheap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func validPage(t testing.TB) ([]byte, header) {
	h := header{version: FormatVersion, state: stateReady, fileSize: 1 << 20, dataOffset: HeaderSize,
		created: 1700000000123456789, pid: 77, layout: []byte("segments=4")}
	page := make([]byte, HeaderSize)
	encodeHeader(page, &h)
	return page, h
}

// reseal recomputes the checksum after a deliberate change, to reach the
// checks that come after it.
func reseal(page []byte) []byte {
	binary.LittleEndian.PutUint64(page[hdrChecksum:], headerChecksum(page))
	return page
}

func TestDecodeHeader(t *testing.T) {
	good, want := validPage(t)
	got, err := decodeHeader(good)
	if err != nil {
		t.Fatal(err)
	}
	if got.version != want.version || got.state != want.state || got.fileSize != want.fileSize ||
		got.dataOffset != want.dataOffset || got.created != want.created || got.pid != want.pid ||
		!bytes.Equal(got.layout, want.layout) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	// A longer slice (a whole file) decodes the same.
	if _, err := decodeHeader(append(bytes.Clone(good), 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	edit := func(fn func(p []byte)) []byte { p := bytes.Clone(good); fn(p); return p }
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
		{"big-endian writer", edit(func(p []byte) { binary.BigEndian.PutUint32(p[hdrEndian:], endianMark) }), ErrEndianness},
		{"bad marker", edit(func(p []byte) { p[hdrEndian] = 9 }), ErrEndianness},
		{"newer version", edit(func(p []byte) { le.PutUint32(p[hdrVersion:], FormatVersion+1) }), ErrVersion},
		{"version 0", edit(func(p []byte) { le.PutUint32(p[hdrVersion:], 0) }), ErrCorrupt},
		{"initializing", edit(func(p []byte) { le.PutUint32(p[hdrState:], stateInitializing) }), ErrNotReady},
		{"state none", edit(func(p []byte) { le.PutUint32(p[hdrState:], stateNone) }), ErrNotReady},
		{"state bit flip", edit(func(p []byte) { p[hdrState] ^= 4 }), ErrCorrupt},
		{"checksum", edit(func(p []byte) { p[hdrChecksum+3] ^= 1 }), ErrChecksum},
		{"size byte", edit(func(p []byte) { p[hdrFileSize+2] ^= 1 }), ErrChecksum},
		{"layout byte", edit(func(p []byte) { p[hdrLayout] ^= 0x20 }), ErrChecksum},
		{"reserved byte", edit(func(p []byte) { p[hdrReserved+100] = 1 }), ErrChecksum},
		{"last byte", edit(func(p []byte) { p[HeaderSize-1] = 1 }), ErrChecksum},
		{"header size", reseal(edit(func(p []byte) { le.PutUint32(p[hdrHeaderSize:], 8192) })), ErrCorrupt},
		{"data offset", reseal(edit(func(p []byte) { le.PutUint64(p[hdrDataOffset:], 0) })), ErrCorrupt},
		{"file size", reseal(edit(func(p []byte) { le.PutUint64(p[hdrFileSize:], 1<<63) })), ErrCorrupt},
		{"layout length", reseal(edit(func(p []byte) { le.PutUint32(p[hdrLayoutLen:], MaxLayoutSize+1) })), ErrCorrupt},
	} {
		if _, err := decodeHeader(tc.page); !errors.Is(err, tc.want) {
			t.Errorf("%s: decodeHeader = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestEveryByteFlipDetected flips each bit of a valid header page in turn:
// none may decode as a valid header, the state word included (a flipped
// state must not read as "initializing", which Create would wipe).
func TestEveryByteFlipDetected(t *testing.T) {
	good, _ := validPage(t)
	p := bytes.Clone(good)
	for i := range HeaderSize {
		for bit := range 8 {
			p[i] ^= 1 << bit
			_, err := decodeHeader(p)
			if err == nil {
				t.Fatalf("flipping bit %d of byte %d went unnoticed", bit, i)
			}
			if errors.Is(err, ErrNotReady) {
				t.Fatalf("flipping bit %d of byte %d made a ready header look unfinished: %v", bit, i, err)
			}
			p[i] ^= 1 << bit
		}
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
	f.Add(good)
	f.Add(good[:hdrLayout])
	f.Add(good[:4])
	f.Add(make([]byte, HeaderSize))
	f.Add([]byte("not a map at all"))
	for _, fn := range []func(p []byte){
		func(p []byte) { p[hdrLayout] ^= 1 },
		func(p []byte) { le.PutUint32(p[hdrState:], stateInitializing) },
		func(p []byte) { le.PutUint32(p[hdrVersion:], FormatVersion+1) },
		func(p []byte) { binary.BigEndian.PutUint32(p[hdrEndian:], endianMark) },
		func(p []byte) { le.PutUint32(p[hdrLayoutLen:], 0xFFFFFFFF); reseal(p) },
		func(p []byte) { le.PutUint64(p[hdrFileSize:], 1<<63); reseal(p) },
	} {
		p := bytes.Clone(good)
		fn(p)
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b) // must not panic, whatever b is
		if err != nil {
			return
		}
		if len(b) < HeaderSize || h.state != stateReady || h.dataOffset != HeaderSize ||
			h.fileSize <= HeaderSize || len(h.layout) > MaxLayoutSize {
			t.Fatalf("accepted an impossible header: %+v", h)
		}
		// What was accepted must survive a round trip.
		p := make([]byte, HeaderSize)
		encodeHeader(p, &h)
		h2, err := decodeHeader(p)
		if err != nil || h2.fileSize != h.fileSize || h2.created != h.created || !bytes.Equal(h2.layout, h.layout) {
			t.Fatalf("round trip of %+v: %+v, %v", h, h2, err)
		}
	})
}
