//go:build linux

package typed

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sharedmap/sharedmap/hashmap"
)

type rvTextKey struct {
	Name string
	n    int
}

// MarshalText is a lossy text form (a case-folded name, say).
func (k rvTextKey) MarshalText() ([]byte, error) { return []byte(strings.ToLower(k.Name)), nil }

type rvMapKey struct {
	M map[rvTextKey]int
}

// TestJSONRefusesMapKeysWithOneName: encoding/json sorts map keys by
// their text with an unstable sort, so two keys whose MarshalText agree
// come out in map order: one key value would encode two ways (Get of a key
// just Put would miss), and a value map of two entries would decode as
// one. JSON must refuse such a map.
func TestJSONRefusesMapKeysWithOneName(t *testing.T) {
	k := rvMapKey{M: map[rvTextKey]int{{"A", 0}: 1, {"a", 1}: 2}}
	seen := map[string]bool{}
	for range 200 {
		b, err := JSON[rvMapKey]().Append(nil, k)
		if err != nil {
			t.Logf("refused: %v", err) // the fix: such a key is refused
			seen = nil
			break
		}
		seen[string(b)] = true
	}
	if len(seen) > 1 {
		t.Errorf("one key encoded %d ways: %q", len(seen), keys(seen))
	}
	m := New(openRaw(t, 100), JSON[rvMapKey](), Int64())
	if err := m.Put(k, 1); err == nil {
		misses := 0
		for range 100 {
			if _, err := m.Get(k); err != nil {
				misses++
			}
		}
		if misses > 0 {
			t.Errorf("Get of the key just Put missed %d times in 100", misses)
		}
	}
	// As a value, the two entries come back one.
	v := New(openRaw(t, 100), String(), JSON[map[rvTextKey]int]())
	if err := v.Put("k", k.M); err == nil {
		if got, err := v.Get("k"); err != nil || len(got) != len(k.M) {
			t.Errorf("a map of %d entries came back as %v, %v", len(k.M), got, err)
		}
	}
}

func (k *rvTextKey) UnmarshalText(b []byte) error { k.Name = string(b); return nil }

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

type rvPanicJSON struct{ S string }

func (p rvPanicJSON) MarshalJSON() ([]byte, error) { panic("MarshalJSON: " + p.S) }

type rvPanicBinary struct{ X int }

func (p rvPanicBinary) MarshalBinary() ([]byte, error) {
	if p.X < 0 {
		panic("MarshalBinary of a negative")
	}
	if p.X == 0 {
		return nil, errors.New("zero refused")
	}
	return []byte{byte(p.X)}, nil
}
func (p *rvPanicBinary) UnmarshalBinary(b []byte) error {
	if len(b) != 1 {
		return errors.New("want 1 byte")
	}
	p.X = int(b[0])
	return nil
}

// TestPanicsInUsersMethodsAreErrors: a panic in a type's own MarshalJSON
// or MarshalBinary is Append's error (it went through both, and through
// Put and Compute), the codec's pool stays sound, and a Compute whose
// value's encoding failed leaves the segment usable.
func TestPanicsInUsersMethodsAreErrors(t *testing.T) {
	try := func(f func() error) (err error, panicked any) {
		defer func() { panicked = recover() }()
		return f(), nil
	}
	err, p := try(func() error { _, err := JSON[rvPanicJSON]().Append(nil, rvPanicJSON{"x"}); return err })
	if p != nil || err == nil || !strings.Contains(err.Error(), "MarshalJSON: x") {
		t.Errorf("JSON Append with a panicking MarshalJSON: err %v, panic %v; want an error", err, p)
	}
	c := Binary[rvPanicBinary]()
	out, err := c.Append([]byte("keep"), rvPanicBinary{0})
	if err == nil || string(out) != "keep" {
		t.Errorf("Binary error: %q, %v", out, err)
	}
	err, p = try(func() error { _, err := c.Append(nil, rvPanicBinary{-1}); return err })
	if p != nil || err == nil || !strings.Contains(err.Error(), "MarshalBinary of a negative") {
		t.Errorf("Binary Append with a panicking MarshalBinary: err %v, panic %v; want an error", err, p)
	}
	if b, err := c.Append(nil, rvPanicBinary{5}); err != nil || !bytes.Equal(b, []byte{5}) {
		t.Errorf("Binary after a panic: %q, %v", b, err)
	}
	m := New(openRaw(t, 100), String(), Binary[rvPanicBinary]())
	err, p = try(func() error {
		return m.Compute("k", func(rvPanicBinary, bool) (rvPanicBinary, bool) { return rvPanicBinary{-1}, true })
	})
	if p != nil || err == nil {
		t.Errorf("Compute whose value's MarshalBinary panics: err %v, panic %v; want an error", err, p)
	}
	if err := m.Put("k", rvPanicBinary{3}); err != nil {
		t.Errorf("Put after a panic under the segment lock: %v", err)
	}
	if _, err := m.Get("k"); errors.Is(err, hashmap.ErrNotFound) || err != nil {
		t.Errorf("Get: %v", err)
	}
}

// rvShortBinary's UnmarshalBinary trusts its input's length, as much user
// code does.
type rvShortBinary struct{ X byte }

func (p rvShortBinary) MarshalBinary() ([]byte, error) { return []byte{p.X}, nil }
func (p *rvShortBinary) UnmarshalBinary(b []byte) error {
	p.X = b[0]
	return nil
}

// TestBinaryDecodeNeverPanics: Codec says Decode must not panic whatever
// b holds (b comes from a file any process can write); Binary passed a
// panic of the type's own UnmarshalBinary through, so a value written raw
// (or by another codec) made Get panic. It is now a DecodeError.
func TestBinaryDecodeNeverPanics(t *testing.T) {
	raw := openRaw(t, 100)
	if err := raw.Put([]byte("k"), nil); err != nil {
		t.Fatal(err)
	}
	m := New(raw, String(), Binary[rvShortBinary]())
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("Get of an empty value: panic: %v", r)
			}
		}()
		if _, err := m.Get("k"); !errors.Is(err, ErrDecode) {
			t.Errorf("Get of an empty value: %v, want ErrDecode", err)
		}
	}()
}
