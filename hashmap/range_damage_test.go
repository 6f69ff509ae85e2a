package hashmap

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestRangeLeavesOutDamagedEntries: an entry whose bytes changed on disk
// after it was written fails its checksum, and Range and RangeView leave it
// out, yield the rest, and end with ErrCorrupt naming it, so that a copy
// made by ranging never stores damaged bytes under a fresh checksum. A map
// without checksums cannot tell, and yields it.
func TestRangeLeavesOutDamagedEntries(t *testing.T) {
	for _, tc := range []struct {
		noChecksums, cache bool
		at                 int // where the damage is, from the value's start
	}{{false, false, 0}, {true, false, 0}, {false, true, 0}, {false, true, -8}} {
		noChecksums := tc.noChecksums
		// In a cache map the value follows its expiry (8 bytes, 0 here):
		// damage there makes the entry look expired, which must not hide
		// it.
		m, path := openTemp(t, &Options{Entries: 1000, NoChecksums: noChecksums, Cache: tc.cache})
		want := map[string]string{"alpha": "first-value", "beta": "VALUE-TO-DAMAGE", "gamma": "third-value"}
		for k, v := range want {
			if err := m.Put([]byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		m.Close()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.LastIndex(b, []byte("VALUE-TO-DAMAGE")) // the entry: tiers come last, after the undo records
		if i < 0 {
			t.Fatal("value not in the file")
		}
		b[i+tc.at] ^= 0x20
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err = Open(path, &Options{Cache: tc.cache})
		if err != nil {
			t.Fatal(err)
		}
		for name, rng := range map[string]func(*error) func(func([]byte, []byte) bool){
			"Range":     func(e *error) func(func([]byte, []byte) bool) { return m.Range(e) },
			"RangeView": func(e *error) func(func([]byte, []byte) bool) { return m.RangeView(e) },
		} {
			var rerr error
			got := map[string]string{}
			for k, v := range rng(&rerr) {
				got[string(k)] = string(v)
			}
			if noChecksums {
				if rerr != nil || len(got) != 3 {
					t.Errorf("no checksums, %s: %d entries, %v; want all 3, no error", name, len(got), rerr)
				}
				continue
			}
			if !errors.Is(rerr, ErrCorrupt) || !strings.Contains(rerr.Error(), `key "beta"`) || !strings.Contains(rerr.Error(), "1 entry") {
				t.Errorf("%s ended with %v; want ErrCorrupt naming beta", name, rerr)
			}
			if len(got) != 2 || got["alpha"] != want["alpha"] || got["gamma"] != want["gamma"] {
				t.Errorf("%s yielded %q; want alpha and gamma only", name, got)
			}
		}
		m.Close()
	}
}
