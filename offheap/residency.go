package offheap

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

// Residency is how much of a mapping this process has in memory, from
// /proc/self/smaps.
type Residency struct {
	Resident int64 // bytes of the mapping backed by pages in this process
	Huge     int64 // of them, bytes mapped with huge (2 MiB) pages
}

// Residency reads how much of the region is resident in this process and
// how much of that is mapped with huge pages (FilePmdMapped for a disk
// file, ShmemPmdMapped for tmpfs), which is how a caller checks that the
// huge-page advice took. It reads /proc/self/smaps, which the kernel
// builds by walking every mapping of the process: a diagnostic, not for a
// hot path.
func (r *Region) Residency() (Residency, error) {
	if len(r.data) == 0 {
		return Residency{}, nil // unmapped: nothing resident
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return Residency{}, fmt.Errorf("residency: %w", err)
	}
	defer f.Close()
	lo := uintptr(unsafe.Pointer(&r.data[0]))
	hi := lo + uintptr(len(r.data))
	var res Residency
	inside := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if start, end, ok := vmaBounds(line); ok {
			inside = start < hi && lo < end
			continue
		}
		if !inside {
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		switch name {
		case "Rss":
			res.Resident += kbField(value)
		case "FilePmdMapped", "ShmemPmdMapped":
			res.Huge += kbField(value)
		}
	}
	if err := sc.Err(); err != nil {
		return Residency{}, fmt.Errorf("residency: %w", err)
	}
	return res, nil
}

// vmaBounds parses the "start-end perms ..." line that opens a mapping's
// record in smaps.
func vmaBounds(line string) (start, end uintptr, ok bool) {
	span, _, found := strings.Cut(line, " ")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(span, "-")
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(a, 16, 64)
	e, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uintptr(s), uintptr(e), true
}

// kbField parses a smaps value such as "  1024 kB" into bytes.
func kbField(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
	return n << 10
}

// Residency is the file's residency: its first mapping's and, for a file
// that may grow, its growth mapping's together.
func (f *File) Residency() (Residency, error) {
	res, err := f.Region.Residency()
	if err != nil || f.Growth == nil {
		return res, err
	}
	grown, err := f.Growth.Residency()
	if err != nil {
		return Residency{}, err
	}
	return Residency{Resident: res.Resident + grown.Resident, Huge: res.Huge + grown.Huge}, nil
}
