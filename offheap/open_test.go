package offheap

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testSize = 1 << 20

func createOpts() OpenOptions {
	return OpenOptions{Create: true, Size: testSize, Layout: []byte("layout-v1")}
}

func TestCreateReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	inits := 0
	o := createOpts()
	o.Init = func(r *Region) error { inits++; atomic.StoreUint64(r.Uint64(HeaderSize), 42); return nil }
	f, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Created() || inits != 1 || string(f.Layout()) != "layout-v1" || f.Size() != testSize {
		t.Fatalf("created=%v inits=%d layout=%q size=%d", f.Created(), inits, f.Layout(), f.Size())
	}
	atomic.AddUint64(f.Uint64(HeaderSize), 1)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	o.Layout = []byte("other")
	f, err = Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Created() || inits != 1 || string(f.Layout()) != "layout-v1" || atomic.LoadUint64(f.Uint64(HeaderSize)) != 43 {
		t.Fatalf("reopen: created=%v inits=%d layout=%q", f.Created(), inits, f.Layout())
	}
	ro, err := Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if !ro.ReadOnly() || atomic.LoadUint64(ro.Uint64(HeaderSize)) != 43 {
		t.Fatal("read-only view wrong")
	}
	if _, err := Open(path, OpenOptions{ReadOnly: true, Create: true, Size: testSize}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("Create+ReadOnly = %v", err)
	}
	if _, err := ro.Slice(testSize-4, 8); err == nil {
		t.Fatal("Slice past the end succeeded")
	}
}

func fileHash(t *testing.T, path string) [32]byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestBadFiles: every damaged or foreign file gives its own error and is
// left byte-for-byte unchanged, even when opened with Create.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	f, err := Open(good, createOpts())
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	orig, _ := os.ReadFile(good)
	mutate := func(fn func(b []byte) []byte) []byte { return fn(append([]byte(nil), orig...)) }
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"text file", []byte("hello, I am not a map\n"), ErrTruncated},
		{"random page", bytes.Repeat([]byte{0x5a, 0x13}, 4096), ErrNotSharedMap},
		{"shorter than header", orig[:100], ErrTruncated},
		{"shorter than recorded", orig[:testSize/2], ErrTruncated},
		{"longer than recorded", append(append([]byte(nil), orig...), make([]byte, 4096)...), ErrSize},
		{"newer version", mutate(func(b []byte) []byte { b[hdrVersion] = FormatVersion + 1; return b }), ErrVersion},
		{"endianness", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[hdrEndian:], endianMark); return b }), ErrEndianness},
		{"flipped header byte", mutate(func(b []byte) []byte { b[hdrFileSize+1] ^= 1; return b }), ErrChecksum},
		{"flipped layout byte", mutate(func(b []byte) []byte { b[hdrLayout+2] ^= 0x40; return b }), ErrChecksum},
		{"bad checksum", mutate(func(b []byte) []byte { b[hdrChecksum] ^= 0xff; return b }), ErrChecksum},
		{"left initializing", mutate(func(b []byte) []byte { b[hdrState] = stateInit; return b }), ErrNotReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			before := fileHash(t, path)
			for _, o := range []OpenOptions{{}, {ReadOnly: true}, createOpts()} {
				if o.Create && tc.want == ErrNotReady {
					continue // with Create, a dead creator's file is legitimately redone
				}
				_, err := Open(path, o)
				if !errors.Is(err, tc.want) {
					t.Fatalf("Open(%+v) = %v, want %v", o, err, tc.want)
				}
				var fe *FileError
				if !errors.As(err, &fe) || fe.Path != path {
					t.Fatalf("error %v does not name the file", err)
				}
			}
			if fileHash(t, path) != before {
				t.Fatal("a bad file was modified")
			}
		})
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Open(empty, OpenOptions{}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("empty file without Create = %v", err)
	}
}

// helperCmd re-executes the test binary in a role.
func helperCmd(role, path string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OFFHEAP_HELPER="+role, "OFFHEAP_FILE="+path)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestHelperProcess(t *testing.T) {
	role := os.Getenv("OFFHEAP_HELPER")
	if role == "" {
		t.Skip("only runs as a helper process")
	}
	path := os.Getenv("OFFHEAP_FILE")
	o := createOpts()
	switch role {
	case "create":
		o.Init = func(r *Region) error { time.Sleep(50 * time.Millisecond); return nil } // widen the race
		f, err := Open(path, o)
		if err != nil {
			fmt.Printf("@ error %v\n", err)
			return
		}
		fmt.Printf("@ ok created=%v layout=%s\n", f.Created(), f.Layout())
	case "hang":
		o.Init = func(r *Region) error { fmt.Println("@ initializing"); time.Sleep(time.Hour); return nil }
		_, _ = Open(path, o)
	}
}

func TestEightProcessesCreateOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "race")
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range 8 {
		cmd := helperCmd("create", path)
		var b bytes.Buffer
		cmd.Stdout = &b
		cmds, outs = append(cmds, cmd), append(outs, &b)
	}
	var wg sync.WaitGroup
	for _, c := range cmds {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Run() }()
	}
	wg.Wait()
	created := 0
	for i, b := range outs {
		line := ""
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "@ ") {
				line = l
			}
		}
		if !strings.HasPrefix(line, "@ ok") || !strings.Contains(line, "layout=layout-v1") {
			t.Fatalf("process %d: %q", i, b.String())
		}
		if strings.Contains(line, "created=true") {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d processes initialized the file, want exactly 1", created)
	}
}

func TestCrashedCreator(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash")
	cmd := helperCmd("hang", path)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.Contains(sc.Text(), "@ initializing") {
	}
	// While the creator lives, openers wait (here: time out quickly).
	o := createOpts()
	o.InitTimeout = 100 * time.Millisecond
	if _, err := Open(path, o); !errors.Is(err, ErrInitTimeout) {
		t.Fatalf("open during creation = %v, want ErrInitTimeout", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := Open(path, OpenOptions{}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("open of a dead creator's file without Create = %v, want ErrNotReady", err)
	}
	f, err := Open(path, createOpts())
	if err != nil {
		t.Fatalf("re-creating after the creator died: %v", err)
	}
	defer f.Close()
	if !f.Created() {
		t.Fatal("the file was not re-initialized")
	}
}

func FuzzDecodeHeader(f *testing.F) {
	page := make([]byte, HeaderSize)
	encodeHeader(page, &header{version: 1, state: stateReady, fileSize: testSize, dataOffset: HeaderSize, layout: []byte("abc")})
	f.Add(page)
	f.Add(page[:64])
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 2*HeaderSize {
			return
		}
		h, err := decodeHeader(b)
		if err == nil && (len(h.layout) > MaxLayoutSize || h.dataOffset != HeaderSize) {
			t.Fatalf("accepted an impossible header: %+v", h)
		}
		// Mutating one byte of a valid header never passes unnoticed unless it is the state.
		if len(b) >= 1 {
			m := append([]byte(nil), page...)
			i := int(b[0]) * 16 % (hdrLayout + 3)
			m[i] ^= 1 | b[len(b)-1]
			if _, err := decodeHeader(m); err == nil && (i < hdrState || i >= hdrState+4) {
				t.Fatalf("flip at %d accepted", i)
			}
		}
	})
}
