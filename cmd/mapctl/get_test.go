//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCreatePutGetDelete(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	if c, _, e := mapctl(t, "", "get", p, "k"); c != exitError || !strings.Contains(e, "no map at "+p+" (create it with mapctl create)") {
		t.Fatalf("get on a missing file: %d %q", c, e)
	}
	if _, err := os.Stat(p); err == nil {
		t.Fatal("get created the missing map")
	}
	// Neither an empty file nor someone else's is made into a map.
	empty, image := filepath.Join(t.TempDir(), "empty"), filepath.Join(t.TempDir(), "image")
	imageData := append(make([]byte, 4096), "precious"...)
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(image, imageData, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, _, e := mapctl(t, "", "put", empty, "k", "v"); c != exitError || !strings.Contains(e, "is empty, not a map") {
		t.Fatalf("put on an empty file: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "", "put", image, "k", "v"); c != exitError || !strings.Contains(e, "not a sharedmap file") {
		t.Fatalf("put on a file that is not a map: %d %q", c, e)
	}
	if b, _ := os.ReadFile(image); !bytes.Equal(b, imageData) {
		t.Fatal("put changed a file that is not a map")
	}
	if st, _ := os.Stat(empty); st.Size() != 0 {
		t.Fatal("put changed an empty file")
	}
	// A map whose creator died (both copies of its header say
	// "initializing": offsets 16 and 2064, 0x0F0F0F0F; docs/FORMAT.md) is
	// not created over at the default size
	// by a command that writes, and not refused as existing by create
	// without a word of what to do.
	half := filepath.Join(t.TempDir(), "half.map")
	if c, _, e := mapctl(t, "", "create", half, "--entries", "5000"); c != 0 {
		t.Fatal(e)
	}
	f, err := os.OpenFile(half, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int64{16, 2048 + 16} {
		if _, err := f.WriteAt([]byte{0x0F, 0x0F, 0x0F, 0x0F}, at); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	halfData, _ := os.ReadFile(half)
	for _, args := range [][]string{{"put", half, "k", "v"}, {"delete", half, "k"}, {"load", half, "-"}, {"recover", half}, {"get", half, "k"}} {
		if c, _, e := mapctl(t, "k\tv\n", args...); c != exitError || !strings.Contains(e, "creation did not finish") || !strings.Contains(e, "remove it, then run mapctl create") {
			t.Errorf("%s on a half-created map: %d %q", args[0], c, e)
		}
	}
	if c, _, e := mapctl(t, "", "create", half); c != exitError || !strings.Contains(e, "already exists") {
		t.Errorf("create over a half-created map: %d %q", c, e)
	}
	if b, _ := os.ReadFile(half); !bytes.Equal(b, halfData) {
		t.Fatal("a command changed a half-created map")
	}
	if c, o, e := mapctl(t, "", "create", p, "--entries", "500", "--segments", "2"); c != 0 || !strings.Contains(o, "2 segments") {
		t.Fatalf("create: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "create", p); c != exitError || !strings.Contains(e, "already exists") {
		t.Fatalf("create over an existing file: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "", "put", p, "k", "v"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	if c, _, e := mapctl(t, "", "put", p, "--", "-dash", "-v"); c != 0 {
		t.Fatalf("put after --: %q", e)
	}
	if c, o, _ := mapctl(t, "", "get", p, "k"); c != 0 || o != "v\n" {
		t.Fatalf("get: %d %q", c, o)
	}
	if c, o, _ := mapctl(t, "", "get", p, "--", "-dash"); c != 0 || o != "-v\n" {
		t.Fatalf("get -dash: %d %q", c, o)
	}
	if c, o, e := mapctl(t, "", "get", p, "absent"); c != exitNotFound || o != "" || !strings.HasPrefix(e, "mapctl: get: ") || !strings.Contains(e, "not found") {
		t.Fatalf("get absent: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "delete", p, "k"); c != 0 {
		t.Fatalf("delete: %q", e)
	}
	if c, _, e := mapctl(t, "", "delete", p, "k"); c != exitNotFound || !strings.Contains(e, "not found") {
		t.Fatalf("delete of an absent key: %d %q", c, e)
	}
	if c, _, _ := mapctl(t, "", "get", p, "k"); c != exitNotFound {
		t.Fatal("deleted key still there")
	}
}

// TestDashKeyHint: a key that looks like a flag is refused with the way
// to pass it, which then works.
func TestDashKeyHint(t *testing.T) {
	p := newMap(t)
	if c, _, e := mapctl(t, "", "get", p, "-k"); c != exitUsage || !strings.Contains(e, `goes after "--": mapctl get [flags] -- PATH KEY`) {
		t.Fatalf("get of -k: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "", "put", "--", p, "-k", "-v"); c != 0 {
		t.Fatalf("put -- PATH -k -v: %d %q", c, e)
	}
	if c, o, e := mapctl(t, "", "get", "--", p, "-k"); c != 0 || o != "-v\n" {
		t.Fatalf("get -- PATH -k: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "stats", p, "-k"); c != exitUsage || strings.Contains(e, "goes after") {
		t.Fatalf("stats with a bad flag: %d %q (no key to hint about)", c, e)
	}
}

// TestCacheTTLCommands: create --cache, put --ttl (flags after the
// arguments too), the entry gone after its TTL; --ttl on a plain map is
// refused with a clear message.
func TestCacheTTLCommands(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.map")
	if c, o, e := mapctl(t, "", "create", p, "--entries", "1000", "--cache"); c != 0 || !strings.Contains(o, "created cache") {
		t.Fatalf("create --cache: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "put", p, "short", "s", "--ttl", "150ms"); c != 0 {
		t.Fatalf("put --ttl: %q", e)
	}
	if c, _, e := mapctl(t, "loaded\tL\n", "load", "--ttl", "150ms", p, "-"); c != 0 {
		t.Fatalf("load --ttl: %q", e)
	}
	if c, _, e := mapctl(t, "", "put", p, "long", "l"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	if c, o, _ := mapctl(t, "", "get", p, "short"); c != 0 || o != "s\n" {
		t.Fatalf("get before expiry: %d %q", c, o)
	}
	time.Sleep(300 * time.Millisecond)
	for _, k := range []string{"short", "loaded"} {
		if c, _, _ := mapctl(t, "", "get", p, k); c != exitNotFound {
			t.Fatalf("get %s after expiry: exit %d, want %d", k, c, exitNotFound)
		}
	}
	if c, o, _ := mapctl(t, "", "get", p, "long"); c != 0 || o != "l\n" {
		t.Fatalf("get of the entry without TTL: %d %q", c, o)
	}
	if c, o, _ := mapctl(t, "", "stats", p, "--json"); c != 0 || !strings.Contains(o, `"cache": true`) || !strings.Contains(o, `"expired"`) || !strings.Contains(o, `"evictions"`) {
		t.Fatalf("stats --json of a cache: %d %q", c, o)
	}
	plain := newMap(t)
	if c, _, e := mapctl(t, "", "put", "--ttl", "1m", plain, "k", "v"); c != exitError || !strings.Contains(e, "not created as a cache") {
		t.Fatalf("put --ttl on a plain map: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "k\tv\n", "load", "--ttl", "1m", plain, "-"); c != exitError || !strings.Contains(e, "not created as a cache") {
		t.Fatalf("load --ttl on a plain map: %d %q", c, e)
	}
}
