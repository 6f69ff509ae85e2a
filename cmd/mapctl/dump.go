package main

import (
	"bufio"
	"flag"
	"fmt"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// dumpOpts are dump's flags.
type dumpOpts struct {
	salvage bool
}

var dumpCmd = &command{
	readOnly: true,
	name:     "dump",
	args:     "PATH",
	summary:  `write every entry as a "key<TAB>value" line`,
	help: `Writes every entry of the map PATH to stdout, one per line:

  key<TAB>value

Inside keys and values a backslash, tab, newline and carriage return are
written \\, \t, \n and \r, so mapctl load reads the output back exactly.
The order is the map's (by hash), not sorted. Each segment is copied
consistently, but entries written by other processes during the dump may or
may not appear. Opens PATH read-only: each segment is copied out and
validated by its modification sequence; no lock word is written. On a
terminal (stderr) it draws a progress line while it runs and ends with a
summary there: the entries written, the size of the file read, the time
and the rate; into a pipe or a file stderr gets neither. Of a
cache map it writes the live entries without their expiry times: loaded
back, they never expire unless mapctl load --ttl gives them a time to live.

Damage does not stop a dump. An entry that fails its checksum or does not
decode (mapctl check lists both) is left out, so that a dump loaded back
never stores damaged bytes under a fresh checksum, and so are the entries
of a segment whose chain of overflow tiers is broken, and of a segment
whose lock stays held for the whole wait (up to twice the lock timeout,
10 s by default, a segment: a process that died holding it keeps it until
mapctl recover releases it); everything else is written, and dump then
exits with status 3, saying what it left out.
mapctl recover --repair keeps what it can of a damaged segment in the file
itself.

With --salvage it reads a map that the other commands refuse: one whose
file header is damaged in both of its copies, or wiped (zeros, or other
bytes, over the first page), or whose size is not the one its header
records (cut short: the missing end reads as empty; extended: the extra
bytes are left out). A map whose file grew is read with every tier it grew
by, and a tier cut short up to where the file ends; stderr says which
tiers were read and which entries are lost. Without a header it finds the
layout from the file itself: the lock table's and the process registry's
own headers say where the segments start and how many there are, and the
one layout whose tiers' entries verify is taken. It says on stderr what the salvage rests
on (whether the map was read as a cache map, and why, among it); every
entry written decodes and passes its checksum (in a map that keeps them),
as always. It never writes the file. Load what it writes into a new map to
go on:

  mapctl dump --salvage /tmp/m.map > entries.tsv
  mapctl create /tmp/new.map --entries N && mapctl load /tmp/new.map entries.tsv

Example:
  mapctl dump /tmp/m.map | sort > entries.tsv`,
	flags: func(fs *flag.FlagSet) any {
		o := &dumpOpts{}
		fs.BoolVar(&o.salvage, "salvage", false, "read a map whose file header is lost or whose size is wrong (never writes it)")
		return o
	},
	run: func(e *env, c *command, opts any, args []string) int {
		if !e.wantArgs(c, args, 1) {
			return exitUsage
		}
		var m *hashmap.Map
		var err error
		if opts.(*dumpOpts).salvage {
			var sv hashmap.Salvaged
			m, sv, err = hashmap.Salvage(args[0], nil)
			for _, note := range sv.Notes {
				fmt.Fprintf(e.stderr, "mapctl: %s: salvage: %s\n", c.name, note)
			}
		} else {
			m, err = openExisting(args[0], true)
		}
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		w := bufio.NewWriterSize(e.stdout, 64<<10)
		p := newProgress(e.stderr, "dumping", "entries", int64(m.Len()))
		start := time.Now()
		var rerr error
		var line []byte
		n := 0
		for k, v := range m.Range(&rerr) {
			if n%1024 == 0 {
				p.update(int64(n), int64(n))
			}
			line = appendEscaped(line[:0], k)
			line = append(line, '\t')
			line = appendEscaped(line, v)
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil {
				return e.fail(c, err)
			}
			n++
		}
		err = w.Flush()
		p.done()
		if err != nil {
			return e.fail(c, err)
		}
		if rerr != nil {
			return e.fail(c, fmt.Errorf("%d entries written: %w", n, rerr))
		}
		if p.on {
			// On a terminal only: stderr of a pipeline is for errors.
			fmt.Fprintf(e.stderr, "dumped %d %s (%s)\n", n, plural(n, "entry", "entries"), throughput(fileSize(m), "read", time.Since(start)))
		}
		return exitOK
	},
}
