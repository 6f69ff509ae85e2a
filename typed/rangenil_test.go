//go:build linux

package typed

import "testing"

// TestTypedRangeWithoutErrorVariable: Range takes a nil errp, and an entry
// that does not decode then ends the loop without a panic.
func TestTypedRangeWithoutErrorVariable(t *testing.T) {
	raw, plain, _ := openStringCounts(t)
	if err := plain.Put("a", 1); err != nil {
		t.Fatal(err)
	}
	n := 0
	for range plain.Range(nil) {
		n++
	}
	if n != 1 {
		t.Fatalf("%d entries", n)
	}
	if err := raw.Put([]byte("odd"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	for range plain.Range(nil) {
	}
}
