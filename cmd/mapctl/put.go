package main

import "fmt"

var putCmd = &command{
	name:    "put",
	args:    "PATH KEY VALUE",
	summary: "store VALUE under KEY, replacing any previous value",
	help: `Stores VALUE under KEY in the existing map PATH (see mapctl create). KEY and
VALUE are taken byte for byte as given; use "--" before them if they start
with "-". To store many entries at once, use mapctl load.

Example:
  mapctl put /tmp/m.map user:42 '{"name":"Ada"}'`,
	run: func(e *env, c *command, _ any, args []string) int {
		if !e.wantArgs(c, args, 3) {
			return exitUsage
		}
		m, err := openExisting(args[0], false)
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		if err := m.Put([]byte(args[1]), []byte(args[2])); err != nil {
			return e.fail(c, fmt.Errorf("key %q: %w", args[1], err))
		}
		return exitOK
	},
}
