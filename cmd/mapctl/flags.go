package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Flags are declared on a standard flag.FlagSet and parsed by parseArgs,
// not by FlagSet.Parse, for three things Parse does not do: flags after
// the arguments (mapctl put m.map k v --ttl 5m), errors that spell flags
// as the help does (--ttl, where Parse says -ttl) and say what a refused
// value should look like, and a suggestion for a misspelt flag. Values are
// stored through FlagSet.Set, so every flag.Value (Func, Duration, ...)
// behaves as it does under Parse, and -name, --name, -name=v and --name=v
// are all accepted, as Parse accepts them.

// parseArgs parses the flags of fs anywhere among args and returns the
// other arguments in order. "--" ends the flags: everything after it is
// an argument, even if it starts with "-"; so is "-" alone (stdin). A
// non-boolean flag takes its value after "=" or as the next argument,
// whatever that argument looks like (--count -1); a boolean one only after
// "=" (--json=false). -h, -help and --help return flag.ErrHelp unless fs
// defines them.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(pos, args[i+1:]...), nil
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if name == "" || name[0] == '-' || name[0] == '=' {
			return nil, fmt.Errorf("bad flag syntax: %s", a)
		}
		f := fs.Lookup(name)
		if f == nil {
			if name == "h" || name == "help" {
				return nil, flag.ErrHelp
			}
			written, _, _ := strings.Cut(a, "=")
			return nil, &unknownFlagError{written: written, suggest: suggestFlag(fs, name)}
		}
		if isBool(f) {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if i+1 == len(args) {
				return nil, fmt.Errorf("flag --%s needs a value: %s", name, wantValue(f))
			}
			i++
			value = args[i]
		}
		if err := fs.Set(name, value); err != nil {
			return nil, badValue(f, value, err)
		}
	}
	return pos, nil
}

// unknownFlagError is a flag the command does not define, as it was
// written (-k, --entires), and the flags it may have meant.
type unknownFlagError struct {
	written string
	suggest []string
}

func (e *unknownFlagError) Error() string {
	msg := "unknown flag " + e.written
	if len(e.suggest) > 0 {
		msg += ": did you mean " + orList(dashed(e.suggest)) + "?"
	}
	return msg
}

// suggestFlag names the flags of fs close to name (see suggest).
func suggestFlag(fs *flag.FlagSet, name string) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return suggest(name, names)
}

func dashed(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "--" + n
	}
	return out
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// badValue is the error for a value f's flag.Value refused: the flag
// package's own reasons ("parse error", "value out of range") do not tell
// a user that --ttl wants a unit or that --entries takes no 1e6, so the
// reason is followed by what the flag takes, with an example.
func badValue(f *flag.Flag, value string, err error) error {
	reason := err.Error()
	if want := wantValue(f); want != "" {
		if reason == "parse error" {
			reason = "want " + want
		} else {
			reason += ": want " + want
		}
	}
	return fmt.Errorf("invalid value %q for flag --%s: %s", value, f.Name, reason)
}

// wantValue says what f takes, by the type of its value: "" for values of
// other types (Func flags), whose errors say it themselves.
func wantValue(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration with its unit, as 90s, 15m or 2h"
	case int, int64, uint, uint64:
		return "a whole number in digits, as 1000000 (no exponent, no suffix)"
	case float64:
		return "a number, as 1.5"
	case bool:
		return "true or false"
	case string:
		return "a string"
	}
	return ""
}

// printFlags writes the flags of fs, sorted, in the layout of
// FlagSet.PrintDefaults but spelt as they are written on the command line
// (--entries, not -entries):
//
//	--entries int
//	    	number of entries to size the map for (default 65536)
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		var b strings.Builder
		fmt.Fprintf(&b, "  --%s", f.Name)
		typ, usage := flag.UnquoteUsage(f)
		if typ != "" && !isBool(f) {
			b.WriteString(" " + typ)
		}
		b.WriteString("\n    \t")
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !isZeroDefault(f) {
			if g, ok := f.Value.(flag.Getter); ok && isString(g.Get()) {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %s)", f.DefValue)
			}
		}
		fmt.Fprintln(w, b.String())
	})
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// isZeroDefault reports whether f's default is its type's zero value,
// which the help leaves unsaid, as PrintDefaults does.
func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "0s", "false":
		return true
	}
	return false
}
