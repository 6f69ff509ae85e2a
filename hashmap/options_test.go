package hashmap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
