package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sharedmap/sharedmap/hashmap"
)

// maxQuoted is how many bytes of a key or value an error message quotes:
// enough to tell which one it was, where a whole 100 KB key would bury the
// error it comes with.
const maxQuoted = 64

// quoteShort quotes s as %q does, cut after maxQuoted bytes with its length
// said after the quote.
func quoteShort(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:shownBytes(s)], len(s))
}

// shownBytes is how much of s, longer than maxQuoted, an error shows: up to
// maxQuoted bytes, backed up to the start of a character, so that the cut
// does not show the first bytes of one as \x escapes.
func shownBytes(s string) int {
	cut := maxQuoted
	for cut > maxQuoted-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return cut
}

// shortenArgs replaces in msg, a flag error, every argument of args longer
// than maxQuoted bytes (whole, without its dashes, or either side of its
// "=", as the flag package quotes or names them) by its first bytes and its
// length, as quoteShort does: the flag package's errors repeat the argument
// they reject whole, and a 100 KB argument that starts with "-" (a key
// meant to go after "--") would fill the terminal. What is left longer
// than maxMessage bytes, which no argument accounts for, is cut.
func shortenArgs(msg string, args []string) string {
	for _, a := range args {
		if len(a) <= maxQuoted {
			continue
		}
		name := strings.TrimLeft(a, "-")
		parts := []string{a, name}
		if n, v, ok := strings.Cut(name, "="); ok {
			parts = append(parts, n, v)
		}
		for _, p := range parts {
			if len(p) > maxQuoted {
				// Quoted first: a bare replacement inside the quotes
				// would leave them around a cut that quoteShort puts
				// outside.
				msg = strings.ReplaceAll(msg, strconv.Quote(p), quoteShort(p))
				msg = strings.ReplaceAll(msg, p, fmt.Sprintf("%s… (%d bytes)", p[:shownBytes(p)], len(p)))
			}
		}
	}
	if len(msg) > maxMessage {
		msg = fmt.Sprintf("%s… (a message of %d bytes)", strings.ToValidUTF8(msg[:maxMessage], ""), len(msg))
	}
	return msg
}

// maxMessage is the most of a flag error shortenArgs leaves.
const maxMessage = 512

// cliText is err's message with the hashmap.Options fields that hashmap's
// messages name replaced by the mapctl flags that set them: someone at
// the command line never wrote MaxBloatFactor or DefaultTTL.
func cliText(err error) string {
	s := err.Error()
	if errors.Is(err, hashmap.ErrFull) {
		s = strings.ReplaceAll(s, "more entries or a larger MaxBloatFactor", "more --entries or a larger --bloat")
		s = strings.ReplaceAll(s, "(MaxSize ", "(--max-size ")
	}
	if errors.Is(err, hashmap.ErrNotCache) {
		s = strings.ReplaceAll(s, hashmap.ErrNotCache.Error(), "the map was not created as a cache (mapctl create --cache)")
		// Open's wording for Options.DefaultTTL, which load --ttl sets.
		s = strings.ReplaceAll(s, "DefaultTTL without Cache: ", "--ttl: ")
		s = strings.ReplaceAll(s, "DefaultTTL: ", "--ttl: ")
	}
	if errors.Is(err, hashmap.ErrCorrupt) {
		s = strings.ReplaceAll(s, "; Repair drops them", "; mapctl recover --repair drops them")
	}
	return s
}
