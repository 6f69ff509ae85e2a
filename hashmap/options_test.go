package hashmap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sharedmap/sharedmap/ipc"
)

// TestAverageSizesBeyondAnEntryAreRefused: an average key and value that,
// with the entry's header (and a cache's expiry), exceed the largest entry
// a tier takes (1 GiB) would make a map that refuses every entry of the
// sizes it is made for. Open refuses them before it creates anything,
// naming both options, the values given and the largest accepted, which
// is accepted.
func TestAverageSizesBeyondAnEntryAreRefused(t *testing.T) {
	for _, c := range []struct {
		o            Options
		largestValue int
	}{
		{Options{Entries: 4, AverageKeySize: 1 << 29, AverageValueSize: 1 << 29}, 1<<30 - 16 - 1<<29},
		{Options{Entries: 4, AverageKeySize: 1 << 29, AverageValueSize: 1<<29 - 16, Cache: true}, 1<<30 - 24 - 1<<29},
		{Options{Entries: 1, AverageKeySize: 100, AverageValueSize: 1 << 29, Cache: true}, 1 << 29},
	} {
		o := c.o
		_, err := FileSize(&o)
		if c.largestValue >= o.AverageValueSize {
			if err != nil {
				t.Errorf("%+v: %v, want it accepted", o, err)
			}
			continue
		}
		if !errors.Is(err, ErrBadOptions) {
			t.Errorf("FileSize(%+v) = %v, want ErrBadOptions", o, err)
			continue
		}
		for _, want := range []string{
			fmt.Sprintf("AverageKeySize %d", o.AverageKeySize),
			fmt.Sprintf("AverageValueSize %d", o.AverageValueSize),
			fmt.Sprintf("the largest AverageValueSize accepted with this AverageKeySize is %d", c.largestValue),
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%+v: %q does not say %q", o, err, want)
			}
		}
		path := filepath.Join(t.TempDir(), "m")
		if m, err := Open(path, &o); !errors.Is(err, ErrBadOptions) {
			if m != nil {
				m.Close()
			}
			t.Errorf("Open(%+v) = %v, want ErrBadOptions", o, err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a refused Open left a file behind: %v", err)
		}
		o.AverageValueSize = c.largestValue
		if _, err := FileSize(&o); err != nil {
			t.Errorf("the largest accepted, %+v: %v", o, err)
		}
	}
}

// TestOptionErrorsNameTheLargestAccepted: each sizing option out of its
// range is refused with an error naming the option, the value given and
// the largest value accepted.
func TestOptionErrorsNameTheLargestAccepted(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want []string
	}{
		{Options{Entries: 1<<40 + 1}, []string{"Entries 1099511627777", "to 1099511627776"}},
		{Options{AverageKeySize: 1<<29 + 1}, []string{"AverageKeySize 536870913", "to 536870912"}},
		{Options{AverageValueSize: 1<<29 + 1}, []string{"AverageValueSize 536870913", "to 536870912"}},
		{Options{MaxBloatFactor: 1001}, []string{"MaxBloatFactor 1001", "to 1000"}},
		{Options{Entries: 1 << 22, Segments: 1 << 21}, []string{"Segments 2097152", "up to 1048576"}},
		{Options{Entries: 10, Segments: 16}, []string{"Segments 16 for Entries 10", "at most one per entry"}},
		{Options{Locks: ipc.MaxLocks}, []string{fmt.Sprintf("Locks %d", ipc.MaxLocks), fmt.Sprintf("0..%d", ipc.MaxLocks-1)}},
		{Options{MaxProcesses: maxProcesses + 1}, []string{fmt.Sprintf("MaxProcesses %d", maxProcesses+1), strconv.Itoa(maxProcesses)}},
	} {
		_, err := FileSize(&c.o)
		if !errors.Is(err, ErrBadOptions) {
			t.Errorf("FileSize(%+v) = %v, want ErrBadOptions", c.o, err)
			continue
		}
		for _, want := range c.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not say %q", err, want)
			}
		}
	}
}

// TestEntriesBeyondTheFormatNameTheLargestAccepted: options whose map
// would exceed the format (more than 64 TiB, or more chunks in a tier than
// a slot names) are refused with the largest Entries accepted with the
// other options, and that many are accepted, one more not.
func TestEntriesBeyondTheFormatNameTheLargestAccepted(t *testing.T) {
	largest := regexp.MustCompile(`the largest Entries accepted with these options is (\d+)`)
	for _, o := range []Options{
		{Entries: 1 << 40},
		{Entries: 1 << 30, MaxBloatFactor: 1000},
		{Entries: 1 << 29, Segments: 1, AverageKeySize: 8, AverageValueSize: 8}, // chunks
		{Entries: 1000, AverageValueSize: 1 << 29, MaxBloatFactor: 1000},
	} {
		_, err := FileSize(&o)
		if !errors.Is(err, ErrBadOptions) {
			t.Errorf("FileSize(%+v) = %v, want ErrBadOptions", o, err)
			continue
		}
		m := largest.FindStringSubmatch(err.Error())
		if m == nil || !strings.Contains(err.Error(), fmt.Sprintf("Entries %d", o.Entries)) {
			t.Errorf("%+v: %q names neither Entries nor the largest accepted", o, err)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		ok := o
		ok.Entries = n
		if _, err := FileSize(&ok); err != nil {
			t.Errorf("the largest accepted, %d: %v", n, err)
		}
		ok.Entries++
		if _, err := FileSize(&ok); !errors.Is(err, ErrBadOptions) {
			t.Errorf("one more than the largest accepted, %d: %v", ok.Entries, err)
		}
		t.Logf("%+v: %v", o, err)
	}
	// Where no Entries fits, it says what to lower instead.
	_, err := FileSize(&Options{Entries: 1 << 21, Segments: 1 << 20, AverageValueSize: 1 << 29})
	if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "no Entries is accepted") {
		t.Errorf("a map too large at any Entries: %v", err)
	}
}
