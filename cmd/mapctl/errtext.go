package main

import (
	"fmt"
	"strconv"
	"unicode/utf8"
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
	cut := maxQuoted
	// Back up to the start of a character, so that the cut does not show
	// the first bytes of one as \x escapes.
	for cut > maxQuoted-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}
