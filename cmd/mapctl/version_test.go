//go:build linux

package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sharedmap/sharedmap/offheap"
)

// TestVersion: mapctl version and mapctl --version print the module
// version, the Go release and the file format versions written and read.
func TestVersion(t *testing.T) {
	format := fmt.Sprintf("file format %d (writes %d, reads 1 to %d)\n", offheap.FormatVersion, offheap.FormatVersion, offheap.FormatVersion)
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		c, o, e := mapctl(t, "", args...)
		if c != exitOK || e != "" || !strings.HasPrefix(o, "mapctl ") || !strings.Contains(o, "built with "+runtime.Version()+" for "+runtime.GOOS+"/"+runtime.GOARCH+"\n") || !strings.HasSuffix(o, format) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want the version, %s and %q", args, c, o, e, runtime.Version(), format)
		}
	}
	for _, args := range [][]string{{"version", "extra"}, {"--version", "extra"}, {"version", "--json"}} {
		if c, o, _ := mapctl(t, "", args...); c != exitUsage || o != "" {
			t.Errorf("%q: exit %d, stdout %q; want a usage error", args, c, o)
		}
	}
	if c, o, _ := mapctl(t, "", "help"); c != exitOK || !strings.Contains(o, "\n  version ") {
		t.Errorf("help does not list version: %q", o)
	}

	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{nil, "mapctl (unknown) (github.com/sharedmap/sharedmap)\n"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/sharedmap/sharedmap", Version: "v1.4.0"}}, "mapctl v1.4.0 (github.com/sharedmap/sharedmap)\n"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/sharedmap/sharedmap", Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2030-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"},
		}}, "mapctl (devel) (github.com/sharedmap/sharedmap), commit 0123456789ab, 2030-01-02T03:04:05Z, modified\n"},
	} {
		if got := versionText(tc.bi); !strings.HasPrefix(got, tc.want) || !strings.HasSuffix(got, format) {
			t.Errorf("versionText(%v) = %q, want %q first and %q last", tc.bi, got, tc.want, format)
		}
	}
}
