//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"
)

// TestCacheModel runs random operations on a small, full cache map against
// a Go map of what was written and when it expires: a Get returns the last value written or ErrNotFound (evicted),
// never another value and never one past its expiry; a Put's value reads
// back right after it; Compute finds only what the model holds live; and
// Check finds the map sound at the end.
func TestCacheModel(t *testing.T) {
	seeds := uint64(20)
	if testing.Short() {
		seeds = 5
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			clock := &testClock{t: time.Unix(1_700_000_000, 0)}
			m, err := Open(filepath.Join(t.TempDir(), "c"), &Options{Entries: 200, AverageKeySize: 8, AverageValueSize: 32, MaxBloatFactor: 1, Segments: 2, Cache: true, DefaultTTL: time.Minute, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			type ent struct {
				val []byte
				exp time.Time // zero: never
			}
			model := map[string]ent{}
			r := rand.New(rand.NewPCG(seed, 7))
			val := func(i int) []byte {
				n := r.IntN(120)
				return bytes.Repeat([]byte{byte(i)}, n)
			}
			live := func(e ent) bool { return e.exp.IsZero() || clock.Now().Before(e.exp) }
			for i := range 20000 {
				k := fmt.Sprintf("k%d", r.IntN(600))
				switch op := r.IntN(10); op {
				case 0, 1, 2:
					v := val(i)
					if err := m.Put([]byte(k), v); err != nil {
						t.Fatalf("op %d Put: %v", i, err)
					}
					model[k] = ent{v, clock.Now().Add(time.Minute)}
					if g, err := m.Get([]byte(k)); err != nil || !bytes.Equal(g, v) {
						t.Fatalf("op %d: Get right after Put: %d bytes, %v", i, len(g), err)
					}
				case 3:
					v := val(i)
					ttl := time.Duration(1+r.IntN(120)) * time.Second
					if r.IntN(4) == 0 {
						ttl = NoExpiry
					}
					if err := m.PutWithTTL([]byte(k), v, ttl); err != nil {
						t.Fatalf("op %d PutWithTTL: %v", i, err)
					}
					e := ent{val: v}
					if ttl != NoExpiry {
						e.exp = clock.Now().Add(ttl)
					}
					model[k] = e
				case 4:
					var newVal []byte
					var wasFound bool
					err := m.Compute([]byte(k), func(old []byte, found bool) ([]byte, bool) {
						wasFound = found
						newVal = append(append([]byte{}, old...), byte(i))
						if len(newVal) > 150 {
							newVal = newVal[:1]
						}
						return newVal, true
					})
					if err != nil {
						t.Fatalf("op %d Compute: %v", i, err)
					}
					e, ok := model[k]
					if ok && live(e) {
						// may have been evicted: then found is false
						if wasFound {
							model[k] = ent{newVal, e.exp}
						} else {
							model[k] = ent{newVal, clock.Now().Add(time.Minute)}
						}
					} else {
						if wasFound {
							t.Fatalf("op %d: Compute found a key the model has as absent/expired", i)
						}
						model[k] = ent{newVal, clock.Now().Add(time.Minute)}
					}
				case 5:
					if _, err := m.Delete([]byte(k)); err != nil {
						t.Fatal(err)
					}
					delete(model, k)
				case 6:
					clock.Advance(time.Duration(r.IntN(5)) * time.Second)
				default:
					g, err := m.Get([]byte(k))
					e, ok := model[k]
					switch {
					case errors.Is(err, ErrNotFound):
						// evicted or expired or absent
					case err != nil:
						t.Fatal(err)
					case !ok:
						t.Fatalf("op %d: Get(%s) = %d bytes, model: absent", i, k, len(g))
					case !live(e):
						t.Fatalf("op %d: Get(%s) returned an expired value", i, k)
					case !bytes.Equal(g, e.val):
						t.Fatalf("op %d: Get(%s) = %v, want %v", i, k, g, e.val)
					}
				}
			}
			st := m.Stats()
			t.Logf("entries %d evictions %d expired %d puts %d deletes %d", st.Entries, st.Evictions, st.Expired, st.Puts, st.Deletes)
			if p, err := m.Check(); err != nil || len(p) != 0 {
				t.Fatalf("Check: %v %v", p, err)
			}
		})
	}
}
