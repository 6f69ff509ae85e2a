package segment

import (
	"errors"
	"testing"
)

// TestLargeValuesFlag: store layouts have the flag and keep it through
// encoding, a record without it decodes without it, and a cache layout
// that claims it is rejected.
func TestLargeValuesFlag(t *testing.T) {
	p := Params{Entries: 1000, AverageKeySize: 8, AverageValueSize: 8, MaxBloatFactor: 1}
	l, err := NewLayout(p, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	if !l.LargeValues || l.PartSize() < minPartSize {
		t.Fatalf("a store layout: large values %v, part size %d", l.LargeValues, l.PartSize())
	}
	got, err := DecodeLayout(l.Encode(), 4096, l.End)
	if err != nil || !got.LargeValues {
		t.Fatalf("decoded %v: large values %v", err, got.LargeValues)
	}
	old := l
	old.LargeValues = false
	if got, err := DecodeLayout(old.Encode(), 4096, l.End); err != nil || got.LargeValues || got.PartSize() != 0 {
		t.Fatalf("a record without the flag: %v, large values %v", err, got.LargeValues)
	}
	p.Cache = true
	c, err := NewLayout(p, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.LargeValues {
		t.Fatal("a cache layout has large values")
	}
	c.LargeValues = true
	if _, err := DecodeLayout(c.Encode(), 4096, c.End); !errors.Is(err, ErrBadLayout) {
		t.Fatalf("a cache record with large values: %v, want ErrBadLayout", err)
	}
}

// TestDescriptorEncoding: a descriptor round-trips, and one whose figures
// disagree does not decode.
func TestDescriptorEncoding(t *testing.T) {
	d := Descriptor{PartSize: 1000, Length: 2500, Parts: 3, ID: 7, Sum: 42}
	b := d.Encode(nil)
	if len(b) != DescriptorSize {
		t.Fatalf("%d bytes", len(b))
	}
	if got, ok := DecodeDescriptor(b); !ok || got != d {
		t.Fatalf("decoded %+v, %v", got, ok)
	}
	bad := d
	bad.Parts = 2
	if _, ok := DecodeDescriptor(bad.Encode(nil)); ok {
		t.Fatal("a descriptor with the wrong part count decoded")
	}
	if from, to := d.PartBounds(2); from != 2000 || to != 2500 {
		t.Fatalf("last part [%d, %d)", from, to)
	}
}
