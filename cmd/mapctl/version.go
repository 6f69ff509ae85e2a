package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/sharedmap/sharedmap/offheap"
)

var versionCmd = &command{
	name:    "version",
	summary: "print mapctl's version, Go release and file formats",
	help: `Prints three lines: the version of the sharedmap module mapctl was built
from, the Go release and platform it was built with, and the map file
format it writes and the ones it reads:

  mapctl v1.4.0 (github.com/sharedmap/sharedmap)
  built with go1.26.0 for linux/amd64
  file format 2 (writes 2, reads 1 to 2)

A build from a source tree (go build, go run) has no module version:
it says "(devel)", with the commit and its time when the build recorded
them, and "modified" if the tree had changes. A map file of a newer format
than mapctl reads is refused by every command, which says which version
it found. "mapctl --version" prints the same.

Example:
  mapctl version`,
	run: func(e *env, c *command, _ any, args []string) int {
		if !e.wantArgs(c, args, 0) {
			return exitUsage
		}
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprint(e.stdout, versionText(bi))
		return exitOK
	},
}

// oldestFormat is the oldest file format version mapctl reads: offheap
// reads version 1 files (one copy of the header) besides FormatVersion.
const oldestFormat = 1

// versionText is what mapctl version prints, from bi (nil if the binary
// has no build information).
func versionText(bi *debug.BuildInfo) string {
	version, path := "(unknown)", "github.com/sharedmap/sharedmap"
	var vcs []string
	if bi != nil {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.Main.Path != "" {
			path = bi.Main.Path
		}
		s := map[string]string{}
		for _, kv := range bi.Settings {
			s[kv.Key] = kv.Value
		}
		if rev := s["vcs.revision"]; rev != "" {
			vcs = append(vcs, "commit "+rev[:min(len(rev), 12)])
			if at := s["vcs.time"]; at != "" {
				vcs = append(vcs, at)
			}
			if s["vcs.modified"] == "true" {
				vcs = append(vcs, "modified")
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "mapctl %s (%s)", version, path)
	if len(vcs) > 0 {
		fmt.Fprintf(&b, ", %s", strings.Join(vcs, ", "))
	}
	fmt.Fprintf(&b, "\nbuilt with %s for %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "file format %d (writes %d, reads %d to %d)\n", offheap.FormatVersion, offheap.FormatVersion, oldestFormat, offheap.FormatVersion)
	return b.String()
}
