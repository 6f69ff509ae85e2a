//go:build linux

package hashmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/offheap"
)

// filledMap creates a map at path holding n entries and returns them.
func filledMap(t *testing.T, path string, opts *Options, n int) map[string]string {
	t.Helper()
	m, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := make(map[string]string, n)
	for i := range n {
		k, v := fmt.Sprintf("key %d", i), strings.Repeat(fmt.Sprintf("value %d;", i), 1+i%7)
		if err := m.Put([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// dumpAll reads every entry of m with Range and reports how it differs
// from want ("" if it does not).
func dumpAll(m *Map, want map[string]string) string {
	var rerr error
	got := make(map[string]string, len(want))
	for k, v := range m.Range(&rerr) {
		got[string(k)] = string(v)
	}
	if rerr != nil {
		return fmt.Sprintf("Range: %v", rerr)
	}
	if len(got) != len(want) {
		return fmt.Sprintf("Range gave %d entries, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Sprintf("Range gave %q = %q, want %q", k, got[k], v)
		}
	}
	return ""
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	fd, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestEveryHeaderBitFlipKeepsEveryEntry flips one bit of each byte of the
// file header page in turn. The map still opens read-only, Range gives
// every entry with its value, and Check names the damage. Every byte of
// the fixed fields of each copy, and every 31st byte else (in the layout
// record or padding), also opens writable (which rewrites the damaged
// copy), and after Repair Check is clean and the page is as creation
// wrote it.
func TestEveryHeaderBitFlipKeepsEveryEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	opts := &Options{Entries: 500, AverageKeySize: 8, AverageValueSize: 40, Segments: 4, MaxProcesses: 4}
	want := filledMap(t, path, opts, 300)
	clean, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := clean[:offheap.HeaderSize]
	for i := range offheap.HeaderSize {
		damaged := bytes.Clone(page)
		damaged[i] ^= 1 << (i % 8)
		writeAt(t, path, damaged, 0)
		m, err := Open(path, &Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("bit %d of header byte %d flipped: read-only Open: %v", i%8, i, err)
		}
		msg := dumpAll(m, want)
		problems, err := m.Check()
		m.Close()
		if msg != "" {
			t.Fatalf("bit %d of header byte %d flipped: %s", i%8, i, msg)
		}
		if err != nil || len(problems) != 1 || !strings.Contains(problems[0].Err.Error(), "file header copy") {
			t.Fatalf("bit %d of header byte %d flipped: Check = %v, %v; want the header copy named", i%8, i, problems, err)
		}
		if j := i % 2048; j >= 64 && i%31 != 0 {
			continue // a writable open syncs the page: milliseconds each
		}
		m, err = Open(path, nil)
		if err != nil {
			t.Fatalf("bit %d of header byte %d flipped: writable Open: %v", i%8, i, err)
		}
		if _, err := m.Repair(); err != nil {
			t.Fatalf("bit %d of header byte %d flipped: Repair: %v", i%8, i, err)
		}
		msg = dumpAll(m, want)
		problems, err = m.Check()
		m.Close()
		if msg != "" || err != nil || len(problems) != 0 {
			t.Fatalf("bit %d of header byte %d flipped, then repaired: %s; Check = %v, %v", i%8, i, msg, problems, err)
		}
		now, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(now[:offheap.HeaderSize], page) {
			t.Fatalf("bit %d of header byte %d flipped, then repaired: the header page is not as creation wrote it", i%8, i)
		}
	}
}

// TestLargestLayoutFits: the largest layout record a map writes (the
// lock algorithm with the longest name, the most processes and locks, a
// cache map) fits a copy of the file header four times over, and is the
// size docs/FORMAT.md and offheap/layout.go give.
func TestLargestLayoutFits(t *testing.T) {
	largest := 0
	for _, alg := range ipc.Algorithms() {
		for _, cache := range []bool{false, true} {
			o, err := (&Options{Entries: 1 << 20, LockAlgorithm: alg.Name, MaxProcesses: maxProcesses, Locks: ipc.MaxLocks - 2, Cache: cache}).withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			l, locks, reg, err := plan(o)
			if err != nil {
				t.Fatal(err)
			}
			n := len(l.Encode()) + len(locks.encode()) + len(encodeRegistryRecord(reg))
			largest = max(largest, n)
		}
	}
	if largest > offheap.MaxLayoutSize/4 {
		t.Errorf("a layout record of %d bytes leaves little room in the header's %d", largest, offheap.MaxLayoutSize)
	}
	if largest != 218 {
		t.Errorf("the largest layout record is %d bytes; docs/FORMAT.md and offheap/layout.go say 218", largest)
	}
}

// version1Map makes a map at path with n entries whose header page is
// version 1, as builds before the two header copies wrote it (one copy
// filling the page, its checksum over the whole page with the state and
// checksum read as zero), and returns its entries and the page.
func version1Map(t *testing.T, path string, n int) (map[string]string, []byte) {
	t.Helper()
	want := filledMap(t, path, &Options{Entries: 500, AverageKeySize: 8, AverageValueSize: 40, MaxProcesses: 4}, n)
	return want, toVersion1(t, path)
}

// toVersion1 rewrites the header page of the map at path as version 1
// and returns the page.
func toVersion1(t *testing.T, path string) []byte {
	t.Helper()
	clean, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	v1 := make([]byte, offheap.HeaderSize)
	layoutLen := int(le.Uint32(clean[52:]))
	copy(v1, clean[:1024+layoutLen]) // copy A: the fields and the layout record, at version 1's offsets
	le.PutUint32(v1[8:], 1)
	sum := bytes.Clone(v1)
	clear(sum[16:20])
	clear(sum[56:64])
	le.PutUint64(v1[56:], xxhash.Sum64(sum))
	writeAt(t, path, v1, 0)
	return v1
}

// TestVersion1MapOpensReadOnly: a map whose header page is version 1 opens
// read-only and reads every entry; a writable Open is refused with
// ErrNeedsUpgrade (and ErrIncompatible), naming the command that
// upgrades it; neither changes the header.
func TestVersion1MapOpensReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	want, v1 := version1Map(t, path, 300)
	m, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open of a version-1 map: %v", err)
	}
	if msg := dumpAll(m, want); msg != "" {
		t.Fatal(msg)
	}
	m.Close()
	for _, o := range []*Options{nil, {NoCreate: true}} {
		_, err = Open(path, o)
		if !errors.Is(err, ErrNeedsUpgrade) || !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "mapctl upgrade "+path) {
			t.Fatalf("writable Open of a version-1 map: %v; want ErrNeedsUpgrade naming mapctl upgrade", err)
		}
	}
	now, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(now[:offheap.HeaderSize], v1) {
		t.Fatal("the version-1 header page changed")
	}
}

// TestUpgradeKeepsEveryEntry: Upgrade rewrites a version-1 map's header as
// the current version, after which the map opens for writing with every
// entry, takes a Put and checks clean; run again, Upgrade says the file is
// current and changes nothing.
func TestUpgradeKeepsEveryEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	want, _ := version1Map(t, path, 300)
	res, err := Upgrade(path)
	if err != nil || res.From != 1 || res.To != offheap.FormatVersion {
		t.Fatalf("Upgrade = %+v, %v", res, err)
	}
	m, err := Open(path, nil)
	if err != nil {
		t.Fatalf("Open after the upgrade: %v", err)
	}
	if msg := dumpAll(m, want); msg != "" {
		t.Fatal(msg)
	}
	if err := m.Put([]byte("new"), []byte("value")); err != nil {
		t.Fatal(err)
	}
	want["new"] = "value"
	problems, err := m.Check()
	msg := dumpAll(m, want)
	m.Close()
	if err != nil || len(problems) != 0 || msg != "" {
		t.Fatalf("upgraded map after a Put: Check = %v, %v; %s", problems, err, msg)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := Upgrade(path); err != nil || res.From != offheap.FormatVersion || len(res.Mended) != 0 {
		t.Fatalf("Upgrade of a current map = %+v, %v", res, err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatal("Upgrade of a current map changed the file")
	}
}

// TestUpgradeRefusedWhileOpen: while a process has a version-1 map open
// for writing (as a build from before could), Upgrade refuses with
// ErrNotAlone and leaves the header as it is; once it closes, Upgrade
// goes ahead.
func TestUpgradeRefusedWhileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	filledMap(t, path, &Options{Entries: 500, AverageKeySize: 8, AverageValueSize: 40, MaxProcesses: 4}, 10)
	m, err := Open(path, nil) // opened as version 2, then the page made version 1 under it
	if err != nil {
		t.Fatal(err)
	}
	v1 := toVersion1(t, path)
	if _, err := Upgrade(path); !errors.Is(err, ErrNotAlone) {
		t.Fatalf("Upgrade with a writer in: %v, want ErrNotAlone", err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now[:offheap.HeaderSize], v1) {
		t.Fatal("a refused Upgrade changed the header")
	}
	m.Close()
	if res, err := Upgrade(path); err != nil || res.From != 1 {
		t.Fatalf("Upgrade once the writer closed: %+v, %v", res, err)
	}
}
