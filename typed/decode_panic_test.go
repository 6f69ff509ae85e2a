//go:build linux

package typed

import (
	"errors"
	"fmt"
	"testing"
)

type rvEmbInner struct{ S string }

// rvTaggedEmb embeds a pointer to an unexported struct under a tag name:
// json encodes it as the field "in", and json.Unmarshal, to fill it,
// sets the unexported pointer and panics (untagged, it returns an error).
type rvTaggedEmb struct {
	*rvEmbInner `json:"in"`
	N           int
}

type rvUntaggedEmb struct {
	*rvEmbInner
	N int
}

// TestJSONDecodeNeverPanics: Decode must not panic whatever b holds
// (Codec's contract, doc.go's caveat). json.Unmarshal panics on the bytes
// Append itself writes for a tagged embedded pointer to an unexported
// struct; Decode, Get and Range must return a DecodeError instead.
func TestJSONDecodeNeverPanics(t *testing.T) {
	decode := func(name string, f func() error) {
		t.Helper()
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			err = f()
		}()
		if err != nil && !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v", name, err)
		}
	}
	c := JSON[rvTaggedEmb]()
	b, err := c.Append(nil, rvTaggedEmb{rvEmbInner: &rvEmbInner{"x"}, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("encoded %s", b)
	decode("tagged, its own encoding", func() error { _, err := c.Decode(b); return err })
	decode("tagged, {\"in\":{}}", func() error { _, err := c.Decode([]byte(`{"in":{}}`)); return err })
	decode("untagged", func() error { _, err := JSON[rvUntaggedEmb]().Decode([]byte(`{"S":"x"}`)); return err })
	raw := openRaw(t, 100)
	m := New(raw, String(), c)
	if err := m.Put("k", rvTaggedEmb{rvEmbInner: &rvEmbInner{"x"}}); err != nil {
		t.Fatal(err)
	}
	decode("Get", func() error { _, err := m.Get("k"); return err })
	decode("Range", func() error {
		var err error
		for range m.Range(&err) {
		}
		return err
	})
}
