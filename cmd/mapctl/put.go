package main

import (
	"flag"
	"fmt"
	"time"
)

var putCmd = &command{
	name:    "put",
	args:    "PATH KEY VALUE",
	summary: "store VALUE under KEY, replacing any previous value",
	help: `Stores VALUE under KEY in the existing map PATH (see mapctl create). KEY and
VALUE are taken byte for byte as given; use "--" before them if they start
with "-". To store many entries at once, use mapctl load.

With --ttl (cache maps only, see mapctl create --cache) the entry expires
after that long: from then on no process sees it. Durations are Go's, as
in 90s, 15m or 2h.

Examples:
  mapctl put /tmp/m.map user:42 '{"name":"Ada"}'
  mapctl put --ttl 10m /dev/shm/cache.map session:7 token`,
	flags: func(fs *flag.FlagSet) any {
		ttl := new(time.Duration)
		fs.DurationVar(ttl, "ttl", 0, "time to live of the entry (cache maps only); 0: it never expires")
		return ttl
	},
	run: func(e *env, c *command, opts any, args []string) int {
		if !e.wantArgs(c, args, 3) {
			return exitUsage
		}
		ttl := *opts.(*time.Duration)
		if ttl < 0 {
			return e.usageError(c, "--ttl must not be negative (0: the entry never expires)")
		}
		m, err := openExisting(args[0], false)
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		if ttl > 0 {
			err = m.PutWithTTL([]byte(args[1]), []byte(args[2]), ttl)
		} else {
			err = m.Put([]byte(args[1]), []byte(args[2]))
		}
		if err != nil {
			return e.fail(c, fmt.Errorf("key %s: %w", quoteShort(args[1]), err))
		}
		return exitOK
	},
}
