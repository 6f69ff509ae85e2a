//go:build linux

package offheap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// mapWithData creates a map file holding recognisable data after the
// header and returns its path and its bytes.
func mapWithData(t *testing.T) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "map")
	f := mustOpen(t, path, createOpts())
	for i := range 64 {
		copy(f.Bytes(HeaderSize+int64(i)*4096, 16), fmt.Sprintf("page %d of data", i))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, mustRead(t, path)
}

func writePage(t *testing.T, path string, page []byte) {
	t.Helper()
	fd, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteAt(page, 0); err != nil {
		t.Fatal(err)
	}
}

func readPage(t *testing.T, path string) []byte {
	t.Helper()
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	page := make([]byte, HeaderSize)
	if _, err := fd.ReadAt(page, 0); err != nil {
		t.Fatal(err)
	}
	return page
}

// isPadding reports whether byte i of the header page is padding of a
// copy whose layout record is n bytes.
func isPadding(i, n int) bool {
	j := i % headerCopySize
	return j >= hdrReserved && (j < hdrLayout || j >= hdrLayout+n)
}

// TestOneCopyIsEnough flips one bit of each byte of the header page of a
// map file in turn. Every such file opens read-only with its layout, size
// and data, leaves the file as it is and names the damaged copy. Every
// field byte, and every 61st byte else (each writable open syncs the page
// twice, milliseconds on a disk), also opens writable: the open rewrites a
// damaged copy from the other (padding aside), and RepairHeader leaves the
// page as creation wrote it.
func TestOneCopyIsEnough(t *testing.T) {
	path, orig := mapWithData(t)
	n := len(createOpts().Layout)
	for i := range HeaderSize {
		damaged := bytes.Clone(orig[:HeaderSize])
		damaged[i] ^= 1 << (i % 8)
		writePage(t, path, damaged)

		ro, err := Open(path, OpenOptions{ReadOnly: true})
		if err != nil {
			t.Fatalf("byte %d flipped: read-only Open: %v", i, err)
		}
		if string(ro.Layout()) != string(createOpts().Layout) || ro.Size() != testSize ||
			!bytes.Equal(ro.Bytes(HeaderSize, 16), orig[HeaderSize:HeaderSize+16]) {
			t.Fatalf("byte %d flipped: read-only Open sees layout %q, size %d", i, ro.Layout(), ro.Size())
		}
		if p := ro.HeaderProblems(); len(p) != 1 || !strings.Contains(p[0].Error(), fmt.Sprintf("copy %c", 'A'+i/headerCopySize)) {
			t.Fatalf("byte %d flipped: HeaderProblems = %v, want one naming copy %c", i, p, 'A'+i/headerCopySize)
		}
		ro.Close()
		if !bytes.Equal(readPage(t, path), damaged) {
			t.Fatalf("byte %d flipped: a read-only Open wrote the header", i)
		}
		if isPadding(i, n) && i%61 != 0 {
			continue
		}

		w, err := Open(path, OpenOptions{})
		if err != nil {
			t.Fatalf("byte %d flipped: writable Open: %v", i, err)
		}
		if mended := w.HeaderMended(); isPadding(i, n) != (len(mended) == 0) {
			t.Fatalf("byte %d flipped: the writable Open mended %q", i, mended)
		}
		if !isPadding(i, n) && len(w.HeaderProblems()) != 0 {
			t.Fatalf("byte %d flipped: after the mend, HeaderProblems = %v", i, w.HeaderProblems())
		}
		if _, err := w.RepairHeader(); err != nil {
			t.Fatalf("byte %d flipped: RepairHeader: %v", i, err)
		}
		if p := w.HeaderProblems(); len(p) != 0 {
			t.Fatalf("byte %d flipped: after RepairHeader, HeaderProblems = %v", i, p)
		}
		w.Close()
		if got := mustRead(t, path); !bytes.Equal(got, orig) {
			t.Fatalf("byte %d flipped: after the mend the file differs from what creation wrote", i)
		}
	}
	writePage(t, path, orig[:HeaderSize])
}

// TestBothCopiesDamaged: the same field damaged in both copies refuses the
// file, naming both, and leaves it as it is.
func TestBothCopiesDamaged(t *testing.T) {
	path, orig := mapWithData(t)
	damaged := bytes.Clone(orig[:HeaderSize])
	damaged[copyA+hdrFileSize] ^= 1
	damaged[copyB+hdrLayout] ^= 1
	writePage(t, path, damaged)
	for _, o := range []OpenOptions{{ReadOnly: true}, {}, createOpts()} {
		_, err := Open(path, o)
		if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "copy A") || !strings.Contains(err.Error(), "copy B") {
			t.Fatalf("Open(%+v) = %v, want ErrChecksum naming both copies", o, err)
		}
	}
	if !bytes.Equal(mustRead(t, path)[:HeaderSize], damaged) {
		t.Fatal("a refused file was written")
	}
}

// TestVersion1FileOpensReadOnly: a file whose header page is version 1
// (one copy, the checksum over the whole page, as builds before the two
// copies wrote it) opens read-only, and a writable Open, with Create or
// without, is refused with ErrNeedsUpgrade; neither changes the page.
func TestVersion1FileOpensReadOnly(t *testing.T) {
	path, v1 := version1File(t)
	orig := mustRead(t, path)
	f, err := Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open of a version-1 file: %v", err)
	}
	if f.formatVersion() != 1 || string(f.Layout()) != string(createOpts().Layout) || f.Size() != testSize || f.Created() ||
		!bytes.Equal(f.Bytes(HeaderSize, 16), orig[HeaderSize:HeaderSize+16]) || len(f.HeaderProblems()) != 0 {
		t.Fatalf("read-only Open of a version-1 file: version %d, layout %q, size %d, problems %v", f.formatVersion(), f.Layout(), f.Size(), f.HeaderProblems())
	}
	f.Close()
	for _, o := range []OpenOptions{{}, createOpts()} {
		if f, err := Open(path, o); !errors.Is(err, ErrNeedsUpgrade) {
			if err == nil {
				f.Close()
			}
			t.Fatalf("Open(%+v) of a version-1 file: %v, want ErrNeedsUpgrade", o, err)
		}
	}
	if !bytes.Equal(mustRead(t, path)[:HeaderSize], v1) {
		t.Fatal("opening a version-1 file changed its header")
	}
	// Checked as version 1 checked it: padding is covered...
	damaged := bytes.Clone(v1)
	damaged[copyB-1] ^= 1
	writePage(t, path, damaged)
	if _, err := Open(path, OpenOptions{ReadOnly: true}); !errors.Is(err, ErrChecksum) {
		t.Fatalf("a version-1 header with a flipped padding bit: %v, want ErrChecksum", err)
	}
	// ...but for the second half, where an upgrade writes copy B first:
	// the page opens as version 1, and the copy is named as an upgrade cut
	// short.
	damaged = bytes.Clone(v1)
	damaged[HeaderSize-1] ^= 1
	writePage(t, path, damaged)
	f, err = Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("a version-1 header with a byte of copy B written: %v", err)
	}
	defer f.Close()
	if p := f.HeaderProblems(); f.formatVersion() != 1 || len(p) != 1 || !strings.Contains(p[0].Error(), "copy B") || !strings.Contains(p[0].Error(), "upgrade") {
		t.Fatalf("a version-1 header with a byte of copy B written: version %d, problems %v", f.formatVersion(), p)
	}
}

// version1File makes a file with data (mapWithData) whose header page is
// version 1, and returns its path and the page.
func version1File(t *testing.T) (string, []byte) {
	t.Helper()
	path, orig := mapWithData(t)
	h, _, err := decodeHeader(orig)
	if err != nil {
		t.Fatal(err)
	}
	h.version = 1
	v1 := make([]byte, HeaderSize)
	encodeV1(v1, &h)
	writePage(t, path, v1)
	return path, v1
}

// TestWrongSizeSaysWhatToDo: a file one byte longer than its header
// records, or 4 KiB shorter, is refused with both sizes, what likely
// happened and the command that puts it right; run, that command does.
func TestWrongSizeSaysWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(path string) error
		want   error
		says   []string
	}{
		{"a zero byte appended", func(path string) error { return os.Truncate(path, testSize+1) }, ErrSize,
			[]string{fmt.Sprint(testSize + 1), fmt.Sprint(testSize), "zeros were added", "truncate -s 1048576 "}},
		{"a byte of data appended", func(path string) error {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte{'x'})
			return err
		}, ErrSize, []string{fmt.Sprint(testSize + 1), fmt.Sprint(testSize), "not all are zeros", "truncate -s 1048576 "}},
		{"4 KiB cut", func(path string) error { return os.Truncate(path, testSize-4096) }, ErrTruncated,
			[]string{fmt.Sprint(testSize - 4096), fmt.Sprint(testSize), "4096 bytes are gone", "mapctl dump --salvage ", "truncate -s 1048576 "}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			path, _ := mapWithData(t)
			if err := tc.change(path); err != nil {
				t.Fatal(err)
			}
			for _, o := range []OpenOptions{{ReadOnly: true}, {}, createOpts()} {
				_, err := Open(path, o)
				if !errors.Is(err, tc.want) {
					t.Fatalf("Open(%+v) = %v, want %v", o, err, tc.want)
				}
				for _, s := range append(tc.says, path) {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("the error %q does not say %q", err, s)
					}
				}
			}
			// The suggested truncate makes the file open again.
			if err := os.Truncate(path, testSize); err != nil {
				t.Fatal(err)
			}
			f, err := Open(path, OpenOptions{ReadOnly: true})
			if err != nil {
				t.Fatalf("after truncate -s %d: %v", testSize, err)
			}
			f.Close()
		})
	}
	if got := shellQuote("/tmp/a b/it's"); got != `'/tmp/a b/it'\''s'` {
		t.Errorf("shellQuote = %s", got)
	}
}

// TestCreatorKilledBetweenTheFlips: a creator killed after it marked copy
// A ready and before copy B leaves a ready file: it opens without Create,
// an Open with Create does not create it again, and a writable Open marks
// copy B ready too.
func TestCreatorKilledBetweenTheFlips(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	cmd := helperCmd("die", path, "OFFHEAP_DIE_AT=copy A ready")
	out, err := cmd.Output()
	if ws, ok := err.(*exec.ExitError); !ok || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the creator ended with %v, not SIGKILL: %s", err, out)
	}
	page := mustRead(t, path)[:HeaderSize]
	if a, b := binary.LittleEndian.Uint32(page[copyA+hdrState:]), binary.LittleEndian.Uint32(page[copyB+hdrState:]); a != stateReady || b != stateInitializing {
		t.Fatalf("states %#x and %#x, want A ready and B initializing", a, b)
	}
	ro, err := Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open: %v", err)
	}
	if p := ro.HeaderProblems(); len(p) != 1 || !strings.Contains(p[0].Error(), "initializing") {
		t.Fatalf("HeaderProblems = %v", p)
	}
	ro.Close()
	f := mustOpen(t, path, createOpts())
	if f.Created() || len(f.HeaderMended()) != 1 || len(f.HeaderProblems()) != 0 {
		t.Fatalf("Open with Create: created %v, mended %q, problems %v", f.Created(), f.HeaderMended(), f.HeaderProblems())
	}
	if b := binary.LittleEndian.Uint32(mustRead(t, path)[copyB+hdrState:]); b != stateReady {
		t.Fatalf("copy B's state %#x after a writable Open, want ready", b)
	}
}
