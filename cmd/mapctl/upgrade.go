package main

import (
	"fmt"

	"github.com/sharedmap/sharedmap/hashmap"
)

var upgradeCmd = &command{
	name:    "upgrade",
	args:    "PATH",
	summary: "rewrite an older map file's header in the current format, in place",
	help: `Rewrites the file header of the map PATH in the current format (version 2:
two copies of the header, each under its own checksum, so that one damaged
copy is rebuilt from the other). A file made by a version that wrote
format 1 (one copy of the header) opens only read-only (get, dump, stats,
check work on it); a command that writes says:

  mapctl: put: open PATH: ... format version 1, which this build opens only
  read-only ...; upgrade it in place, with no process using it, by: mapctl
  upgrade PATH

Only the first 4 KiB of the file, the header page, is written: every
field of the header and the layout it records are kept, and so is every
entry. So a file made before the file could grow, or before its tiers
carried stamps (which let repair read what a tier is rather than infer
it), gains neither: upgrade says so, and mapctl resize PATH rewrites the
map into a new file that has both (resize also reads an older-format file,
so it can take the place of upgrade). It needs the map to itself: it refuses while any process has the
map open for writing (readers may stay), and while it runs no process can
open it for writing.

It is safe to interrupt: killed at any point, or cut by a power failure,
it leaves a file that opens, in the old format or the new one; run it
again to finish. On a file already in the current format it says so and
changes nothing (but for a header copy left damaged by an upgrade cut
short, which it rewrites from the other copy, as any writer's open does).

Prints what it did:

  upgraded PATH: file header format 1 -> 2; every entry kept
  PATH: file header already format 2; nothing changed

and, for a file without growth or stamps, a line after:

  PATH: the file does not grow, and its tiers carry no stamps; mapctl
  resize PATH rewrites it in the current layout

Exit status 0 if the file is in the current format afterwards, 3 if it is
not (another process has it open for writing, or the file is not a map).

Example:
  mapctl upgrade /srv/old.map && mapctl check /srv/old.map`,
	run: func(e *env, c *command, _ any, args []string) int {
		if !e.wantArgs(c, args, 1) {
			return exitUsage
		}
		path := args[0]
		res, err := hashmap.Upgrade(path)
		if err != nil {
			return e.fail(c, err)
		}
		defer upgradeHint(e, path, res)
		for _, m := range res.Mended {
			fmt.Fprintf(e.stdout, "%s: %s\n", path, m)
		}
		switch {
		case res.From == res.To && len(res.Mended) > 0:
			fmt.Fprintf(e.stdout, "%s: file header format %d, a copy an interrupted upgrade left rewritten; every entry kept\n", path, res.To)
			return exitOK
		case res.From == res.To:
			fmt.Fprintf(e.stdout, "%s: file header already format %d; nothing changed\n", path, res.To)
			return exitOK
		}
		fmt.Fprintf(e.stdout, "upgraded %s: file header format %d -> %d; every entry kept\n", path, res.From, res.To)
		return exitOK
	},
}

// upgradeHint says, after upgrade's report, what the header rewrite did
// not give the file at path, and how to gain it.
func upgradeHint(e *env, path string, res hashmap.UpgradeResult) {
	var lacks string
	switch {
	case res.LacksGrowth && res.LacksStamps:
		lacks = "the file does not grow, and its tiers carry no stamps"
	case res.LacksGrowth:
		lacks = "the file does not grow"
	case res.LacksStamps:
		lacks = "its tiers carry no stamps"
	default:
		return
	}
	fmt.Fprintf(e.stdout, "%s: %s; mapctl resize %s rewrites it in the current layout\n", path, lacks, path)
}
