package main

import (
	"fmt"

	"github.com/sharedmap/sharedmap/hashmap"
)

var deleteCmd = &command{
	name:    "delete",
	args:    "PATH KEY",
	summary: "remove KEY (exit 1 if absent)",
	help: `Removes KEY and its value from the map PATH. If KEY was absent, says so on
stderr and exits with status 1 (the map is unchanged).

Example:
  mapctl delete /tmp/m.map user:42`,
	run: func(e *env, c *command, _ any, args []string) int {
		if !e.wantArgs(c, args, 2) {
			return exitUsage
		}
		m, err := openExisting(args[0], false)
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		existed, err := m.Delete([]byte(args[1]))
		if err != nil {
			return e.fail(c, fmt.Errorf("key %s: %w", quoteShort(args[1]), err))
		}
		if !existed {
			return e.fail(c, fmt.Errorf("key %s: %w", quoteShort(args[1]), hashmap.ErrNotFound))
		}
		return exitOK
	},
}
