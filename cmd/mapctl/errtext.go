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

// shortenWords cuts every space-separated word of msg longer than
// maxQuoted bytes to its first bytes and its length, as quoteShort does: the
// flag package's errors repeat the argument they reject whole, and a 100 KB
// argument that starts with "-" (a key meant to go after "--") would fill
// the terminal.
func shortenWords(msg string) string {
	words := strings.Split(msg, " ")
	for i, w := range words {
		if len(w) <= maxQuoted {
			continue
		}
		words[i] = fmt.Sprintf("%s… (%d bytes)", w[:shownBytes(w)], len(w))
	}
	return strings.Join(words, " ")
}

// cliText is err's message with the hashmap.Options fields that hashmap's
// messages name replaced by the mapctl flags that set them: someone at
// the command line never wrote MaxBloatFactor or DefaultTTL.
func cliText(err error) string {
	s := err.Error()
	if errors.Is(err, hashmap.ErrFull) {
		s = strings.ReplaceAll(s, "more entries or a larger MaxBloatFactor", "more --entries or a larger --bloat")
	}
	if errors.Is(err, hashmap.ErrNotCache) {
		s = strings.ReplaceAll(s, hashmap.ErrNotCache.Error(), "the map was not created as a cache (mapctl create --cache)")
		// Open's wording for Options.DefaultTTL, which load --ttl sets.
		s = strings.ReplaceAll(s, "DefaultTTL without Cache: ", "--ttl: ")
		s = strings.ReplaceAll(s, "DefaultTTL: ", "--ttl: ")
	}
	return s
}
