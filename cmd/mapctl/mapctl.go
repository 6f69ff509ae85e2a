package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/offheap"
)

// Exit statuses.
const (
	exitOK       = 0
	exitNotFound = 1 // get or delete of an absent key
	exitUsage    = 2 // bad command line
	exitError    = 3 // anything else
)

// env is where a command reads and writes: the process's standard streams,
// or buffers in tests.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// command is one subcommand.
type command struct {
	name    string
	args    string // positional arguments, e.g. "PATH KEY VALUE"
	summary string // one line for "mapctl help"
	help    string // the rest of "mapctl NAME --help": what, args, exit status, example
	flags   func(fs *flag.FlagSet) any
	run     func(e *env, c *command, opts any, args []string) int
	hidden  bool
	// readOnly: the command opens the map read-only, so it cannot release
	// what a dead process held (see fail).
	readOnly bool
}

// commands lists the subcommands in the order "mapctl help" shows them.
func commands() []*command {
	return []*command{
		createCmd, putCmd, getCmd, deleteCmd, loadCmd, dumpCmd,
		statsCmd, inspectCmd, checkCmd, recoverCmd, upgradeCmd, resizeCmd, demoCmd, benchCmd, lockbenchCmd, versionCmd,
		demoWorkerCmd, benchWorkerCmd, lockbenchWorkerCmd,
	}
}

const exitStatusHelp = `Exit status: 0 success, 1 key not found (get, delete), 2 usage error,
3 any other error. Errors are printed on stderr as "mapctl: COMMAND: error".`

func (e *env) mainUsage(w io.Writer) {
	fmt.Fprint(w, `mapctl creates, fills, dumps, inspects and exercises sharedmap files: hash maps
of byte-string keys and values in a memory-mapped file, shared by every process
that opens it.

Usage: mapctl COMMAND [flags] ARGS...

Commands:
`)
	width := len("help")
	for _, c := range commands() {
		if !c.hidden {
			width = max(width, len(c.name))
		}
	}
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-*s %-16s %s\n", width, c.name, c.args, c.summary)
		}
	}
	fmt.Fprintf(w, `  %-*s %-16s %s

Run "mapctl COMMAND --help" (or "mapctl help COMMAND") for a command's
arguments, flags and an example. Flags may come before or after the
arguments; put "--" before arguments that start with "-". "mapctl --version"
is "mapctl version".

%s

Example:
  mapctl create /tmp/m.map --entries 100000 --key-size 16 --value-size 64
  mapctl put /tmp/m.map hello world && mapctl get /tmp/m.map hello
  mapctl demo
`, width, "help", "[COMMAND]", "show this help, or a command's", exitStatusHelp)
}

// run is the whole program: it returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) (status int) {
	// A map file that another program truncated, or whose blocks a full
	// disk cannot supply, faults (SIGBUS) where the command touches it:
	// a failure to report with exit status 3, not a crash with a
	// goroutine dump and status 2, which says "usage error". (Faults in
	// the command's own goroutine; demo and bench workers are processes.)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			fault, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			fmt.Fprintf(stderr, "%s: memory fault at %#x reading or writing the map file: was it truncated, or is its disk full?\n", speaker(args), fault.Addr())
			status = exitError
		}
	}()
	out := &errorWriter{w: stdout}
	e := &env{stdin: stdin, stdout: out, stderr: stderr}
	status = e.runArgs(args)
	if out.err != nil && status == exitOK {
		// Output that did not arrive (a full disk, a closed pipe) is a
		// failure, not a success with less to say; but what the command
		// did to the map is done, and a retry must not be led to think
		// otherwise (a create retried finds the map there).
		fmt.Fprintf(stderr, "%s: writing the output: %v (the command itself completed; only its output was lost)\n", speaker(args), out.err)
		return exitError
	}
	return status
}

// speaker is how an error outside a command's own reporting starts:
// "mapctl: COMMAND" when args name a command, else "mapctl".
func speaker(args []string) string {
	if len(args) > 0 && lookup(args[0]) != nil {
		return "mapctl: " + args[0]
	}
	return "mapctl"
}

// helpCmd is help itself, for "mapctl help help": it is no entry of
// commands(), since runArgs answers it before any lookup.
var helpCmd = &command{
	name:    "help",
	args:    "[COMMAND]",
	summary: "show this help, or a command's",
	help: `Without COMMAND, lists the commands. With one, prints its arguments, flags,
exit status and an example, as "mapctl COMMAND --help" does.

Examples:
  mapctl help
  mapctl help create`,
}

// runArgs is run with its output wrapped.
func (e *env) runArgs(args []string) int {
	stdout, stderr := e.stdout, e.stderr
	if len(args) == 0 {
		e.mainUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		// "mapctl --help create" as "mapctl help create".
		if len(args) > 2 {
			fmt.Fprintf(stderr, "mapctl: help: one command at most (run \"mapctl help\" for the list)\n")
			return exitUsage
		}
		if len(args) > 1 {
			if c := lookup(args[1]); c != nil {
				e.commandHelp(c, stdout)
				return exitOK
			}
			switch args[1] {
			case "help", "-h", "-help", "--help":
				e.commandHelp(helpCmd, stdout)
				return exitOK
			}
			fmt.Fprintf(stderr, "mapctl: help: %s (run \"mapctl help\" for the list)\n", unknownCommand(args[1]))
			return exitUsage
		}
		e.mainUsage(stdout)
		return exitOK
	case "--version", "-version":
		// As "mapctl version".
		args = append([]string{versionCmd.name}, args[1:]...)
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "mapctl: %s (run \"mapctl help\" for the list)\n", unknownCommand(args[0]))
		return exitUsage
	}
	fs := newFlagSet(c)
	var opts any
	if c.flags != nil {
		opts = c.flags(fs)
	}
	pos, err := parseArgs(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		e.commandHelp(c, stdout)
		return exitOK
	}
	if err != nil {
		msg := shortenArgs(err.Error(), args[1:])
		var unknown *unknownFlagError
		if errors.As(err, &unknown) && strings.Contains(c.args, "KEY") {
			msg += `; a key or value that starts with "-" goes after "--": mapctl ` + c.name + ` [flags] -- ` + c.args
		}
		return e.usageError(c, msg)
	}
	return c.run(e, c, opts, pos)
}

// errorWriter passes writes on and keeps the first error.
type errorWriter struct {
	w   io.Writer
	err error
}

func (w *errorWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// rootFlags are the flags mapctl takes before a command, as
// "mapctl --help".
var rootFlags = []string{"help", "version"}

// unknownCommand says that name is no command, and which it may have
// meant: a command whose name is close, or, for a name that starts with
// "-", a flag of mapctl's own or where a command's flags go.
func unknownCommand(name string) string {
	if len(name) > 1 && name[0] == '-' {
		written, _, _ := strings.Cut(name, "=")
		if near := suggest(strings.TrimLeft(written, "-"), rootFlags); len(near) > 0 {
			return fmt.Sprintf("unknown flag %s: did you mean %s?", quoteShort(written), orList(dashed(near)))
		}
		return fmt.Sprintf("unknown command %s: a command's flags go after its name, as in mapctl create PATH --entries 1000", quoteShort(name))
	}
	names := []string{helpCmd.name}
	for _, c := range commands() {
		if !c.hidden {
			names = append(names, c.name)
		}
	}
	msg := "unknown command " + quoteShort(name)
	if near := suggest(name, names); len(near) > 0 {
		for i, n := range near {
			near[i] = strconv.Quote(n)
		}
		msg += ": did you mean " + orList(near) + "?"
	}
	return msg
}

func lookup(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

func newFlagSet(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by usageError
	fs.Usage = func() {}
	return fs
}

// commandHelp prints the full help of c.
func (e *env) commandHelp(c *command, w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n\n%s.\n\n%s\n", c.usageLine(), upperFirst(c.summary), strings.TrimSpace(c.help))
	fs := newFlagSet(c)
	if c.flags != nil {
		c.flags(fs)
	}
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprint(w, "\nFlags:\n")
		printFlags(w, fs)
	}
	fmt.Fprintf(w, "\n%s\n", exitStatusHelp)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// usageError reports a bad command line: exit status 2.
func (e *env) usageError(c *command, msg string) int {
	fmt.Fprintf(e.stderr, "mapctl: %s: %s\nusage: %s (run \"mapctl %s --help\" for details)\n",
		c.name, msg, c.usageLine(), c.name)
	return exitUsage
}

// usageLine is the command's synopsis: mapctl, its name, [flags] and its
// arguments, if it takes any.
func (c *command) usageLine() string {
	if c.args == "" {
		return "mapctl " + c.name + " [flags]"
	}
	return "mapctl " + c.name + " [flags] " + c.args
}

// wantArgs checks the number of positional arguments.
func (e *env) wantArgs(c *command, args []string, n int) bool {
	if len(args) == n {
		return true
	}
	if n == 0 {
		e.usageError(c, fmt.Sprintf("takes no arguments, got %d", len(args)))
		return false
	}
	plural := "s"
	if n == 1 {
		plural = ""
	}
	e.usageError(c, fmt.Sprintf("want %d argument%s (%s), got %d", n, plural, c.args, len(args)))
	return false
}

// fail reports err: exit status 1 for a missing key, 3 otherwise.
func (e *env) fail(c *command, err error) int {
	msg := cliText(err)
	if errors.Is(err, hashmap.ErrTimeout) && c.readOnly {
		// A command that only reads cannot release what a dead process
		// held (it does not write the file): say what can. Writers
		// release it themselves, so their timeouts are a live holder's.
		msg += " (if a process died holding that lock, mapctl check names it and mapctl recover releases it)"
	}
	fmt.Fprintf(e.stderr, "mapctl: %s: %s\n", c.name, msg)
	if errors.Is(err, hashmap.ErrNotFound) {
		return exitNotFound
	}
	return exitError
}

// openExisting opens a map that must already exist: hashmap.Open alone
// would create a missing file.
func openExisting(path string, readOnly bool) (*hashmap.Map, error) {
	return openExistingWith(path, &hashmap.Options{ReadOnly: readOnly})
}

func openExistingWith(path string, o *hashmap.Options) (*hashmap.Map, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no map at %s (create it with mapctl create)", path)
	} else if err != nil {
		return nil, err
	}
	// NoCreate: hashmap.Open alone would create a map of its default size
	// in an empty file, or over one whose creator died, where the user
	// meant another (a create of 20M entries killed early, say).
	o.NoCreate = true
	m, err := hashmap.Open(path, o)
	if errors.Is(err, offheap.ErrNotReady) {
		// After waiting for a live creator to finish, as Open does.
		if st, serr := os.Stat(path); serr == nil && st.Size() == 0 {
			return nil, fmt.Errorf("%s is empty, not a map (create one there with mapctl create)", path)
		}
		return nil, fmt.Errorf("%s is not a map: its creation did not finish (its creator died or failed, or is only starting: then try again); remove it, then run mapctl create", path)
	}
	switch {
	case errors.Is(err, offheap.ErrChecksum) || errors.Is(err, offheap.ErrCorrupt):
		return nil, fmt.Errorf("%w; mapctl dump --salvage %s writes out every entry that is still sound, to load into a new map", err, path)
	case errors.Is(err, offheap.ErrNotSharedMap):
		if st, serr := os.Stat(path); serr == nil && st.Size() > offheap.HeaderSize {
			return nil, fmt.Errorf("%w (if it was a map whose first page was overwritten, mapctl dump --salvage %s writes out its entries)", err, path)
		}
	}
	return m, err
}
