//go:build linux

package registry

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/offheap"
)

// wideLayout is a registry with a high-water mark whose slots span many
// 2 MiB units (Allocate reserves whole ones), so that pages of slots past
// the mark can be told apart from those of the slots claimed.
var wideLayout = Layout{Off: offheap.HeaderSize, Slots: 256, Ledgers: 4096, HighWater: true}

func openWide(t testing.TB, path string) *offheap.File { return openLayout(t, path, wideLayout) }

// openLayout opens, creating it if need be, a file at path that holds a
// registry laid out as l after the header, mapped without huge pages (so
// that what a test reads is what is resident), closed at the test's end.
func openLayout(t testing.TB, path string, l Layout) *offheap.File {
	t.Helper()
	f, err := offheap.Open(path, offheap.OpenOptions{
		Create:      true,
		NoHugePages: true,
		Size:        offheap.HeaderSize + l.Bytes(),
		Init: func(r *offheap.Region) error {
			Format(r.Bytes(l.Off, l.Bytes()), l)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestHighWaterMarkBoundsScans: in an area with a high-water mark, Join
// raises the mark over each slot it claims past it, and Live, Slots,
// Alone, Check and Mend read no page of the slots past it: a map whose
// registry has room for thousands of processes costs a scan of those that
// ever had it open.
func TestHighWaterMarkBoundsScans(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reg")
	f := openWide(t, path) // scans through this mapping alone, which joins nothing
	a := attachLayout(t, f, wideLayout)
	if a.InUse() != 0 {
		t.Fatalf("a new registry's mark is %d, want 0", a.InUse())
	}
	const joined = 3
	var regs []*Registry
	for k := range joined {
		g := openWide(t, path)
		r := attachLayout(t, g, wideLayout)
		i, err := r.Join(time.Second)
		if err != nil || i != k || r.InUse() != k+1 {
			t.Fatalf("join %d: slot %d, %v; mark %d", k, i, err, r.InUse())
		}
		regs = append(regs, r)
	}
	live, err := a.Live(nil)
	if err != nil || len(live) != joined {
		t.Fatalf("Live = %v, %v; want %d slots", live, err, joined)
	}
	if slots, err := a.Slots(); err != nil || len(slots) != joined {
		t.Fatalf("Slots = %v, %v", slots, err)
	}
	if alone, err := a.Alone(); alone || err != nil {
		t.Fatalf("Alone = %v, %v", alone, err)
	}
	if n := a.Check(func(err error) { t.Error(err) }); n != 0 {
		t.Fatalf("Check found %d problems", n)
	}
	if n, err := a.Mend(time.Second); n != 0 || err != nil {
		t.Fatalf("Mend = %d, %v", n, err)
	}
	// A scan of every slot would read a page of each (a slot is 8
	// pages): the scans read those of the slots claimed, and the header.
	res, err := f.Residency()
	if limit := wideLayout.slotOff(joined) + 4096; err != nil || res.Resident > limit {
		t.Fatalf("%d bytes of the registry's %d in memory after the scans (%v); want at most %d", res.Resident, wideLayout.Bytes(), err, limit)
	}
	// A slot left is taken again below the mark.
	if err := regs[1].Leave(); err != nil {
		t.Fatal(err)
	}
	r := attachLayout(t, openWide(t, path), wideLayout)
	if i, err := r.Join(time.Second); i != 1 || err != nil || r.InUse() != joined {
		t.Fatalf("join after a leave: slot %d, %v; mark %d", i, err, r.InUse())
	}
}

// TestHighWaterMarkRaisedBeforeTheClaim: a mark raised over a slot whose
// claim never happened (its process died between the two) leaves a free
// slot below the mark, which the next Join takes; a slot claimed past the
// mark (damage to the mark) is a live process all the same once Mend puts
// a mark past the slot count back to the count.
func TestHighWaterMarkRaisedBeforeTheClaim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reg")
	f := openWide(t, path)
	a := attachLayout(t, f, wideLayout)
	atomic.StoreUint64(f.Uint64(wideLayout.Off+hHighWater), 2) // raised over slots 0 and 1, never claimed
	if live, err := a.Live(nil); len(live) != 0 || err != nil {
		t.Fatalf("Live = %v, %v", live, err)
	}
	if i, err := a.Join(time.Second); i != 0 || err != nil || a.InUse() != 2 {
		t.Fatalf("Join = %d, %v; mark %d", i, err, a.InUse())
	}
	atomic.StoreUint64(f.Uint64(wideLayout.Off+hHighWater), uint64(wideLayout.Slots)+5)
	var problems []error
	a.Check(func(err error) { problems = append(problems, err) })
	if len(problems) != 1 || !errors.Is(problems[0], ErrCorrupt) {
		t.Fatalf("Check of a mark past the slots: %v", problems)
	}
	if a.InUse() != wideLayout.Slots {
		t.Fatalf("a mark past the slots reads as %d, want every slot", a.InUse())
	}
	if n, err := a.Mend(time.Second); n != 1 || err != nil {
		t.Fatalf("Mend = %d, %v", n, err)
	}
	if v := atomic.LoadUint64(f.Uint64(wideLayout.Off + hHighWater)); v != uint64(wideLayout.Slots) {
		t.Fatalf("mended mark %d, want %d", v, wideLayout.Slots)
	}
}

// TestHighWaterAreaIsItsOwnKind: an area with a mark has its own magic, so
// that a layout without one refuses it (and the other way round), and Find
// tells which it is.
func TestHighWaterAreaIsItsOwnKind(t *testing.T) {
	f := openWide(t, filepath.Join(t.TempDir(), "reg"))
	plain := wideLayout
	plain.HighWater = false
	if _, err := Attach(f, plain); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Attach without a mark of an area with one: %v", err)
	}
	l, err := Find(f, wideLayout.Off)
	if err != nil || l != wideLayout {
		t.Fatalf("Find = %+v, %v; want %+v", l, err, wideLayout)
	}
}

func attachLayout(t testing.TB, f *offheap.File, l Layout) *Registry {
	t.Helper()
	r, err := Attach(f, l)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
