//go:build linux

package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// toVersion1 rewrites the header page of the map at path as version 1
// wrote it: one copy filling the page, its checksum over the whole page
// with the state and checksum read as zero.
func toVersion1(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	page := make([]byte, 4096)
	copy(page, b[:1024+int(le.Uint32(b[52:]))])
	le.PutUint32(page[8:], 1)
	sum := bytes.Clone(page)
	clear(sum[16:20])
	clear(sum[56:64])
	le.PutUint64(page[56:], xxhash.Sum64(sum))
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(page, 0); err != nil {
		t.Fatal(err)
	}
}

// TestUpgrade: a map with a version-1 header is read by get, refused by
// put with the upgrade command named; upgrade rewrites it, after which put
// works and every entry is there; upgrade again changes nothing.
func TestUpgrade(t *testing.T) {
	p := newMap(t)
	for _, kv := range [][2]string{{"a", "1"}, {"b", "2"}} {
		if c, _, e := mapctl(t, "", "put", p, kv[0], kv[1]); c != 0 {
			t.Fatalf("put: %d %s", c, e)
		}
	}
	toVersion1(t, p)
	if c, o, e := mapctl(t, "", "get", p, "a"); c != 0 || o != "1\n" {
		t.Fatalf("get of a version-1 map: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "put", p, "c", "3"); c != exitError || !strings.Contains(e, "mapctl upgrade "+p) {
		t.Fatalf("put into a version-1 map: %d %q; want the upgrade command named", c, e)
	}
	if c, o, e := mapctl(t, "", "upgrade", p); c != 0 || o != "upgraded "+p+": file header format 1 -> 2; every entry kept\n" {
		t.Fatalf("upgrade: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "put", p, "c", "3"); c != 0 {
		t.Fatalf("put after the upgrade: %d %q", c, e)
	}
	if c, o, e := mapctl(t, "", "dump", p); c != 0 || sortedLines(o) != "a\t1\nb\t2\nc\t3" {
		t.Fatalf("dump after the upgrade: %d %q %q", c, o, e)
	}
	before, _ := os.ReadFile(p)
	if c, o, e := mapctl(t, "", "upgrade", p); c != 0 || o != p+": file header already format 2; nothing changed\n" {
		t.Fatalf("upgrade of a current map: %d %q %q", c, o, e)
	}
	if after, _ := os.ReadFile(p); !bytes.Equal(after, before) {
		t.Fatal("upgrade of a current map changed the file")
	}
	if c, _, e := mapctl(t, "", "upgrade"); c != exitUsage || !strings.Contains(e, "usage") {
		t.Fatalf("upgrade without a path: %d %q", c, e)
	}
}
