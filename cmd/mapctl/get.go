package main

import "fmt"

var getCmd = &command{
	readOnly: true,
	name:     "get",
	args:     "PATH KEY",
	summary:  "print the value stored under KEY (exit 1 if absent)",
	help: `Prints the value stored under KEY in the map PATH, as raw bytes followed by
a newline. If KEY is absent, prints nothing on stdout, a "not found" message
on stderr, and exits with status 1. Opens PATH read-only: it never
writes the file, not even a lock word.

It verifies the entry's checksum first: a value whose bytes changed after
it was written (damage, or a write torn by a machine crash) is not printed;
get says so and exits with status 3 (mapctl recover --repair drops such
entries). Programs reading through the library get that check from
Map.GetChecked; Get and GetInto trust the file.

Example:
  mapctl get /tmp/m.map user:42 || echo "no such user"`,
	run: func(e *env, c *command, _ any, args []string) int {
		if !e.wantArgs(c, args, 2) {
			return exitUsage
		}
		m, err := openExisting(args[0], true)
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		v, err := m.GetChecked(nil, []byte(args[1]))
		if err != nil {
			return e.fail(c, fmt.Errorf("key %s: %w", quoteShort(args[1]), err))
		}
		v = append(v, '\n')
		if _, err := e.stdout.Write(v); err != nil {
			return e.fail(c, err)
		}
		return exitOK
	},
}
