//go:build amd64 || arm64

package hashmap

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The cases here need an int of 64 bits: Entries beyond 2^31.

// TestEntriesBeyondTheLimitNameIt: Entries past the largest a map may be
// sized for is refused, naming that largest.
func TestEntriesBeyondTheLimitNameIt(t *testing.T) {
	_, err := FileSize(&Options{Entries: 1<<40 + 1})
	if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "Entries 1099511627777") || !strings.Contains(err.Error(), "to 1099511627776") {
		t.Errorf("Entries 2^40+1: %v", err)
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
