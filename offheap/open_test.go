//go:build linux

package offheap

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const testSize = 1 << 20

func createOpts() OpenOptions {
	return OpenOptions{Create: true, Size: testSize, Layout: []byte("layout-v1")}
}

func mustOpen(t *testing.T, path string, o OpenOptions) *File {
	t.Helper()
	f, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestCreateReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	var inits atomic.Int32
	o := createOpts()
	o.Init = func(r *Region) error {
		inits.Add(1)
		if r.ReadOnly() || r.Len() != testSize {
			t.Errorf("Init got a region of %d bytes, read-only %v", r.Len(), r.ReadOnly())
		}
		atomic.StoreUint64(r.Uint64(HeaderSize), 42)
		return nil
	}
	before := time.Now()
	f, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Created() || inits.Load() != 1 || string(f.Layout()) != "layout-v1" || f.Size() != testSize ||
		f.DataOffset() != HeaderSize || f.Path() != path || f.creatorPID() != os.Getpid() ||
		f.createdAt().Before(before.Add(-time.Second)) || f.ReadOnly() {
		t.Fatalf("created=%v inits=%d layout=%q size=%d data=%d pid=%d at=%v",
			f.Created(), inits.Load(), f.Layout(), f.Size(), f.DataOffset(), f.creatorPID(), f.createdAt())
	}
	f.Layout()[0] = 'X' // a copy: must not change the File
	atomic.AddUint64(f.Uint64(HeaderSize), 1)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	created := f.createdAt()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != testSize {
		t.Fatalf("file after Close: %v, %v", st, err)
	}

	// Create on a ready file just opens it: its own Size and Layout are
	// ignored, and Init does not run.
	o.Layout, o.Size = []byte("other"), 2*testSize
	g := mustOpen(t, path, o)
	if g.Created() || inits.Load() != 1 || string(g.Layout()) != "layout-v1" || g.Size() != testSize ||
		!g.createdAt().Equal(created) || atomic.LoadUint64(g.Uint64(HeaderSize)) != 43 {
		t.Fatalf("reopen: created=%v inits=%d layout=%q size=%d", g.Created(), inits.Load(), g.Layout(), g.Size())
	}
	// Two open Files of one path share the pages.
	h := mustOpen(t, path, OpenOptions{})
	atomic.StoreUint64(h.Uint64(HeaderSize+8), 7)
	if atomic.LoadUint64(g.Uint64(HeaderSize+8)) != 7 || h.Created() {
		t.Fatal("second mapping does not share pages")
	}
}

func TestSizeRoundedToPages(t *testing.T) {
	o := createOpts()
	o.Size = HeaderSize + int64(os.Getpagesize()) + 1
	f := mustOpen(t, filepath.Join(t.TempDir(), "map"), o)
	if want := HeaderSize + 2*int64(os.Getpagesize()); f.Size() != want {
		t.Fatalf("size %d, want %d", f.Size(), want)
	}
}

func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	w := mustOpen(t, path, createOpts())
	atomic.StoreUint64(w.Uint64(HeaderSize), 99)
	before := fileHash(t, path)

	ro := mustOpen(t, path, OpenOptions{ReadOnly: true})
	if !ro.ReadOnly() || atomic.LoadUint64(ro.Uint64(HeaderSize)) != 99 || string(ro.Layout()) != "layout-v1" {
		t.Fatal("read-only view is wrong")
	}
	if err := ro.Allocate(HeaderSize, 4096); !errors.Is(err, errReadOnly) {
		t.Fatalf("Allocate through a read-only File = %v", err)
	}
	if err := ro.Sync(); err != nil {
		t.Fatalf("Sync of a read-only File = %v", err)
	}
	// The mapping is PROT_READ: a write faults. SetPanicOnFault turns the
	// fault into a panic we can observe instead of a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("writing through a read-only mapping did not fault")
			}
		}()
		// A plain store: under -race an atomic one would fault inside the
		// race runtime's C code, where no panic can be raised.
		ro.Bytes(HeaderSize, 1)[0] = 1
	}()
	if atomic.LoadUint64(w.Uint64(HeaderSize)) != 99 || fileHash(t, path) != before {
		t.Fatal("the file changed")
	}

	if _, err := Open(path, OpenOptions{ReadOnly: true, Create: true, Size: testSize}); !errors.Is(err, errBadOptions) {
		t.Fatalf("Create+ReadOnly = %v", err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := Open(missing, OpenOptions{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only open of a missing file = %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a read-only open created the file")
	}
}

func TestBadOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	page := int64(os.Getpagesize())
	for _, o := range []OpenOptions{
		{Create: true, ReadOnly: true, Size: testSize},
		{Create: true, Size: 0},
		{Create: true, Size: HeaderSize},
		{Create: true, Size: HeaderSize + page - 1},
		{Create: true, Size: -1},
		{Create: true, Size: 1 << 62},
		{Create: true, Size: testSize, Layout: make([]byte, MaxLayoutSize+1)},
		{Create: true, Size: testSize, initTimeout: -time.Second},
		{CreateNew: true, Size: testSize},
	} {
		_, err := Open(path, o)
		var fe *fileError
		if !errors.Is(err, errBadOptions) || !errors.As(err, &fe) || fe.Path != path {
			t.Errorf("Open(%+v) = %v, want errBadOptions", o, err)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("bad options created the file")
	}
	o := createOpts()
	o.Layout = make([]byte, MaxLayoutSize)
	o.Layout[MaxLayoutSize-1] = 1
	if f := mustOpen(t, path, o); !bytes.Equal(f.Layout(), o.Layout) {
		t.Fatal("a layout of MaxLayoutSize bytes did not round-trip")
	}
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestBadFiles: every foreign, damaged or unfinished file gives its own
// sentinel from every kind of Open, names the path, and is left
// byte-for-byte unchanged, even by an Open with Create.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	f := mustOpen(t, good, createOpts())
	copy(f.Bytes(HeaderSize, 5), "hello")
	f.Close()
	orig, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same bytes every run
	random := make([]byte, 3*HeaderSize)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	le := binary.LittleEndian
	// Each edit is made to both copies of the header: one copy is enough
	// to open the file (TestOneCopyIsEnough).
	edit := func(fn func(b []byte)) []byte { b := bytes.Clone(orig); fn(b[copyA:]); fn(b[copyB:]); return b }
	for _, tc := range []struct {
		name     string
		data     []byte
		want     error
		createOK bool // Open with Create legitimately initializes it
	}{
		{"text file", []byte("hello, I am not a map\n"), ErrNotSharedMap, false},
		{"random bytes", random, ErrNotSharedMap, false},
		{"magic only", []byte(magic), ErrTruncated, false},
		{"shorter than header", orig[:100], ErrTruncated, false},
		{"shorter than recorded", orig[:testSize/2], ErrTruncated, false},
		{"longer than recorded", append(bytes.Clone(orig), make([]byte, 4096)...), ErrSize, false},
		{"newer version", edit(func(b []byte) { le.PutUint32(b[hdrVersion:], FormatVersion+1) }), ErrVersion, false},
		{"newer version initializing", edit(func(b []byte) {
			le.PutUint32(b[hdrVersion:], FormatVersion+1)
			le.PutUint32(b[hdrState:], stateInitializing)
		}), ErrVersion, false},
		{"endianness", edit(func(b []byte) { binary.BigEndian.PutUint32(b[hdrEndian:], endianMark) }), ErrEndianness, false},
		{"flipped header byte", edit(func(b []byte) { b[hdrFileSize+1] ^= 1 }), ErrChecksum, false},
		{"flipped layout byte", edit(func(b []byte) { b[hdrLayout+2] ^= 0x40 }), ErrChecksum, false},
		{"bad checksum", edit(func(b []byte) { b[hdrChecksum] ^= 0xff }), ErrChecksum, false},
		{"flipped state bit", edit(func(b []byte) { b[hdrState] ^= 0x10 }), ErrCorrupt, false},
		{"empty", nil, ErrNotReady, true},
		// Creators write the header first: zeros were never ours to wipe.
		{"zero header page", make([]byte, 2*HeaderSize), ErrNotSharedMap, false},
		{"short zeros", make([]byte, 10), ErrNotSharedMap, false},
		{"disk image", append(make([]byte, HeaderSize), []byte("precious data")...), ErrNotSharedMap, false},
		{"left initializing", edit(func(b []byte) { le.PutUint32(b[hdrState:], stateInitializing) }), ErrNotReady, true},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			before := fileHash(t, path)
			opts := []OpenOptions{{}, {ReadOnly: true}}
			if !tc.createOK {
				opts = append(opts, createOpts())
			}
			for _, o := range opts {
				_, err := Open(path, o)
				if !errors.Is(err, tc.want) {
					t.Fatalf("Open(%+v) = %v, want %v", o, err, tc.want)
				}
				var fe *fileError
				if !errors.As(err, &fe) || fe.Path != path || !strings.HasPrefix(err.Error(), "open "+path+": "+tc.want.Error()) {
					t.Fatalf("error %q does not read \"open PATH: %v: ...\"", err, tc.want)
				}
			}
			if fileHash(t, path) != before {
				t.Fatal("a bad file was modified")
			}
		})
	}
}

// TestReinitialize: files a creator left unfinished (empty, or with its
// header saying so) are initialized again by an Open with Create, from
// zeros.
func TestReinitialize(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	f := mustOpen(t, good, createOpts())
	copy(f.Bytes(HeaderSize, 5), "stale")
	f.Close()
	orig, _ := os.ReadFile(good)
	initializing := bytes.Clone(orig)
	binary.LittleEndian.PutUint32(initializing[copyA+hdrState:], stateInitializing)
	binary.LittleEndian.PutUint32(initializing[copyB+hdrState:], stateInitializing)
	none := bytes.Clone(orig)
	binary.LittleEndian.PutUint32(none[copyA+hdrState:], stateNone)
	binary.LittleEndian.PutUint32(none[copyB+hdrState:], stateNone)
	for name, data := range map[string][]byte{
		"empty":        nil,
		"header only":  initializing[:HeaderSize], // died before sizing the file
		"initializing": initializing,
		"state none":   none,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		o := createOpts()
		o.Layout = []byte("fresh")
		f := mustOpen(t, path, o)
		if !f.Created() || string(f.Layout()) != "fresh" || f.Size() != testSize || !allZero(f.Bytes(HeaderSize, testSize-HeaderSize)) {
			t.Errorf("%s: created=%v layout=%q size=%d", name, f.Created(), f.Layout(), f.Size())
		}
	}
}

// TestConcurrentOpenInProcess: goroutines racing to create one path hold
// separate descriptors, so flock serializes them as it does processes.
func TestConcurrentOpenInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	var inits, created atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			o := createOpts()
			o.Init = func(*Region) error { inits.Add(1); time.Sleep(10 * time.Millisecond); return nil }
			f, err := Open(path, o)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			if f.Created() {
				created.Add(1)
			}
			if string(f.Layout()) != "layout-v1" {
				t.Errorf("layout %q", f.Layout())
			}
		})
	}
	wg.Wait()
	if created.Load() != 1 || inits.Load() != 1 {
		t.Fatalf("%d opens created, Init ran %d times; want 1 and 1", created.Load(), inits.Load())
	}
}

// TestCreateNew: of goroutines creating one path with CreateNew, exactly
// one succeeds and the others get ErrExists; an empty file is created
// over, and any other file (a map, one whose creator died, a foreign one)
// is refused and left as it was.
func TestCreateNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "map")
	var created, refused atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			o := createOpts()
			o.CreateNew = true
			o.Init = func(*Region) error { time.Sleep(10 * time.Millisecond); return nil }
			f, err := Open(path, o)
			switch {
			case err == nil:
				created.Add(1)
				f.Close()
			case errors.Is(err, ErrExists) && errors.Is(err, fs.ErrExist):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if created.Load() != 1 || refused.Load() != 5 {
		t.Fatalf("%d created, %d refused; want 1 and 5", created.Load(), refused.Load())
	}

	orig, _ := os.ReadFile(path)
	initializing := bytes.Clone(orig)
	binary.LittleEndian.PutUint32(initializing[copyA+hdrState:], stateInitializing)
	binary.LittleEndian.PutUint32(initializing[copyB+hdrState:], stateInitializing)
	for name, data := range map[string][]byte{
		"empty":        nil,
		"ready":        orig,
		"initializing": initializing,
		"foreign":      []byte("some other program's data"),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		o := createOpts()
		o.CreateNew = true
		f, err := Open(p, o)
		if name == "empty" {
			if err != nil || !f.Created() {
				t.Errorf("empty file: %v", err)
			} else {
				f.Close()
			}
			continue
		}
		if !errors.Is(err, ErrExists) {
			t.Errorf("%s: %v, want ErrExists", name, err)
		}
		if now, _ := os.ReadFile(p); !bytes.Equal(now, data) {
			t.Errorf("%s: the refused file changed", name)
		}
	}
}

func TestInitFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	boom := errors.New("boom")
	o := createOpts()
	o.Init = func(*Region) error { return boom }
	if _, err := Open(path, o); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "create "+path) {
		t.Fatalf("Open with a failing Init = %v", err)
	}
	if _, err := Open(path, OpenOptions{}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Open after a failed Init = %v, want ErrNotReady", err)
	}
	o.Init = func(r *Region) error { r.Bytes(0, 1)[0] = 'X'; return nil }
	if _, err := Open(path, o); err == nil || !strings.Contains(err.Error(), "header page") {
		t.Fatalf("Open with an Init that overwrites the header = %v", err)
	}
	// A panicking Init must not leak the descriptor, which holds the lock:
	// the next Open would then wait for initTimeout.
	o.Init = func(*Region) error { panic("init panics") }
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not propagate")
			}
		}()
		_, _ = Open(path, o)
	}()
	o.Init, o.initTimeout = nil, time.Second
	if f := mustOpen(t, path, o); !f.Created() {
		t.Fatal("the file was not initialized after the failures")
	}
}

func TestAllocate(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "map"), createOpts())
	if err := f.Allocate(f.DataOffset(), 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := f.Allocate(f.Size(), 0); err != nil {
		t.Fatalf("empty range: %v", err)
	}
	for _, r := range [][2]int64{{-1, 10}, {0, -1}, {f.Size() - 10, 11}, {1 << 62, 1 << 62}} {
		var re *rangeError
		if err := f.Allocate(r[0], r[1]); !errors.As(err, &re) {
			t.Errorf("Allocate(%d, %d) = %v, want a rangeError", r[0], r[1], err)
		}
	}
	if st, _ := os.Stat(f.Path()); st.Size() != testSize {
		t.Fatalf("Allocate changed the file size to %d", st.Size())
	}
}

func TestFallocateError(t *testing.T) {
	if fallocateError(nil, 0, 1) != nil || fallocateError(unix.EOPNOTSUPP, 0, 1) != nil {
		t.Error("success or no fallocate support must be nil")
	}
	if err := fallocateError(unix.ENOSPC, 4096, 8192); !errors.Is(err, ErrNoSpace) {
		t.Errorf("ENOSPC = %v, want ErrNoSpace", err)
	}
	if err := fallocateError(unix.EIO, 0, 1); !errors.Is(err, unix.EIO) || errors.Is(err, ErrNoSpace) {
		t.Errorf("EIO = %v", err)
	}
}

// A path that is not a regular file is refused at once, whatever the
// options: a named pipe used to make Open wait for a writer for good, and
// a device to fail later with a puzzling error (truncate: invalid
// argument, or "not initialized" for /dev/null).
func TestSpecialFilesRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, "/dev/null", dir} {
		for name, o := range map[string]OpenOptions{
			"create":    createOpts(),
			"open":      {},
			"read-only": {ReadOnly: true},
		} {
			done := make(chan error, 1)
			go func() {
				f, err := Open(path, o)
				if err == nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				var fe *fileError
				if !errors.As(err, &fe) {
					t.Errorf("%s (%s): %v, want a *fileError", path, name, err)
				}
				if path != dir && !errors.Is(err, ErrNotSharedMap) {
					t.Errorf("%s (%s): %v, want ErrNotSharedMap", path, name, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s (%s): Open still waiting after 10 s", path, name)
			}
		}
	}
	if st, err := os.Stat(fifo); err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
		t.Errorf("the named pipe was changed: %v, %v", st, err)
	}
}
