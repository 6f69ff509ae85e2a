//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/offheap"
)

// TestCorruptionNeverPanics flips random bytes in each region of a filled
// map (header page, lock arena, registry, segment headers, and tiers:
// slots, bitmaps and entries) and opens, reads and checks the damaged
// copy. Each trial must end, within a bound, with an error from Open, or
// with Gets that return a value, ErrNotFound or ErrCorrupt, and a Check
// that lists problems or none: never a panic, never a hang. A value that
// Get returns for a key must be the key's value or one Check objects to.
func TestCorruptionNeverPanics(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m")
	opts := &Options{Entries: 2000, AverageKeySize: 8, AverageValueSize: 24, Segments: 4, LockTimeout: 50 * time.Millisecond}
	m, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for i := range 1500 {
		k, v := fmt.Appendf(nil, "k%d", i), bytes.Repeat([]byte{byte(i)}, 1+i%40)
		if err := m.Put(k, v); err != nil {
			t.Fatal(err)
		}
		want[string(k)] = v
	}
	l := *m.layout
	regStart := offheap.HeaderSize + m.lockLayout.bytes
	m.Close()
	clean, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The undamaged copy must check clean, or the counts below say nothing.
	if msg := corruptTrial(path, opts, want, new(int), new(int), new(int)); msg != "" {
		t.Fatalf("undamaged file: %s", msg)
	}
	if m, err := Open(path, &Options{ReadOnly: true}); err != nil {
		t.Fatal(err)
	} else {
		problems, err := m.Check()
		m.Close()
		if err != nil || len(problems) != 0 {
			t.Fatalf("undamaged file: Check = %v, %v", problems, err)
		}
	}
	regions := []struct {
		name       string
		start, end int64
	}{
		{"header", 0, offheap.HeaderSize},
		{"lock arena header", offheap.HeaderSize, offheap.HeaderSize + 64},
		{"lock arena", offheap.HeaderSize + 64, regStart},
		{"registry header", regStart, regStart + 64},
		{"registry", regStart + 64, l.GlobalOff},
		{"segment headers", l.GlobalOff, l.StatsOff},
		{"counters", l.StatsOff, l.UndoOff},
		{"undo records", l.UndoOff, l.TiersOff},
		{"tiers", l.TiersOff, l.TiersOff + l.Segments*l.TierSize},
	}
	trials := 60
	if testing.Short() {
		trials = 15
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, reg := range regions {
		if reg.end <= reg.start {
			continue
		}
		var openErrs, checkFound, getCorrupt, repaired, repairedClean, lost int
		for trial := range trials {
			b := bytes.Clone(clean)
			for range 1 + rng.IntN(8) {
				b[reg.start+rng.Int64N(reg.end-reg.start)] ^= byte(1 + rng.IntN(255))
			}
			p := filepath.Join(dir, fmt.Sprintf("c-%d", trial))
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			done := make(chan string, 1)
			go func() {
				msg := corruptTrial(p, opts, want, &openErrs, &checkFound, &getCorrupt)
				if msg == "" {
					msg = repairTrial(p, opts, want, &repaired, &repairedClean, &lost)
				}
				done <- msg
			}()
			select {
			case msg := <-done:
				if msg != "" {
					t.Errorf("%s, trial %d: %s", reg.name, trial, msg)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("%s, trial %d: no answer in 20s", reg.name, trial)
			}
			os.Remove(p)
		}
		t.Logf("%s: %d damaged files: %d refused at open, %d with problems found by Check, %d Gets gave ErrCorrupt; "+
			"%d repaired, %d of them clean afterwards, %d keys lost in all",
			reg.name, trials, openErrs, checkFound, getCorrupt, repaired, repairedClean, lost)
		// Only the file header, by which everything else is read, makes
		// Open refuse the file, and only when damage reaches what both of
		// its copies say; every file that opens, Repair mends. Damage
		// anywhere else leaves it readable (and dumpable), and Repair
		// mends it: the lock table's and the registry's headers from the
		// sizes the file header holds, the rest as Check reports it.
		if reg.name == "header" {
			if openErrs > trials/10 || repairedClean != trials-openErrs || checkFound != trials-openErrs {
				t.Errorf("header: %d of %d damaged files refused, %d with problems found, %d clean after Repair; want at most %d refused, and every other found and mended",
					openErrs, trials, checkFound, repairedClean, trials/10)
			}
			continue
		}
		if openErrs > 0 {
			t.Errorf("%s: %d of %d damaged files refused by a read-only Open", reg.name, openErrs, trials)
		}
		if repairedClean < trials-max(1, trials/20) {
			t.Errorf("%s: only %d of %d damaged files checked clean after Repair", reg.name, repairedClean, trials)
		}
	}
}

func corruptTrial(p string, opts *Options, want map[string][]byte, openErrs, checkFound, getCorrupt *int) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("panic: %v", r)
		}
	}()
	o := *opts
	o.ReadOnly = true
	m, err := Open(p, &o)
	if err != nil {
		*openErrs++
		return ""
	}
	defer m.Close()
	problems, err := m.Check()
	if err != nil {
		return fmt.Sprintf("Check: %v", err)
	}
	if len(problems) > 0 {
		*checkFound++
	}
	wrong := 0
	for k, v := range want {
		got, err := m.Get([]byte(k))
		switch {
		case errors.Is(err, ErrCorrupt):
			*getCorrupt++
		case err == nil && !bytes.Equal(got, v):
			wrong++
		}
	}
	if wrong > 0 && len(problems) == 0 {
		return fmt.Sprintf("%d keys read back wrong and Check found nothing", wrong)
	}
	return ""
}

// repairTrial opens the damaged file p for writing and repairs it. Repair
// may give up, but what a repaired map returns must be right: every Get
// gives the key's value, ErrNotFound (its entry was dropped) or, while
// Check still objects to something, ErrCorrupt.
func repairTrial(p string, opts *Options, want map[string][]byte, repaired, clean, lost *int) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("repair: panic: %v", r)
		}
	}()
	o := *opts
	m, err := Open(p, &o)
	if err != nil {
		return "" // refused at open: nothing to repair through the API
	}
	defer m.Close()
	rep, err := m.Repair()
	if err != nil || len(rep.Failed) > 0 {
		return ""
	}
	*repaired++
	problems, err := m.Check()
	if err != nil {
		return fmt.Sprintf("Check after Repair: %v", err)
	}
	for k, v := range want {
		got, err := m.Get([]byte(k))
		switch {
		case errors.Is(err, ErrNotFound):
			*lost++
		case errors.Is(err, ErrCorrupt) && len(problems) > 0:
		case err != nil:
			return fmt.Sprintf("after Repair, Get(%q): %v (Check: %v)", k, err, problems)
		case !bytes.Equal(got, v):
			return fmt.Sprintf("after Repair, Get(%q) = %q, want %q (Check: %v)", k, got, v, problems)
		}
	}
	if len(problems) == 0 {
		*clean++
	}
	return ""
}

// TestHeaderDamageIsErrCorrupt: Open of a file whose header page is damaged
// or which was truncated fails with an error that matches ErrCorrupt as
// well as offheap's own sentinel, and says what offheap says.
func TestHeaderDamageIsErrCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		damage func([]byte) []byte
		cause  error
	}{
		{"a flipped header byte in both copies", func(b []byte) []byte { b[1030] ^= 0x40; b[2048+1030] ^= 0x40; return b }, offheap.ErrChecksum},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, offheap.ErrTruncated},
	} {
		if err := os.WriteFile(path, c.damage(bytes.Clone(good)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path, nil)
		if !errors.Is(err, ErrCorrupt) || !errors.Is(err, c.cause) || errors.Is(err, ErrIncompatible) {
			t.Errorf("%s: Open gave %v; want ErrCorrupt and %v", c.name, err, c.cause)
		}
	}
}
