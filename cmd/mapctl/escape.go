package main

import (
	"bytes"
	"fmt"
)

// The load and dump text format is one entry per line, "key<TAB>value",
// with backslash, tab, newline and carriage return inside keys and values
// written as \\, \t, \n and \r, so that any bytes round-trip.

// appendEscaped appends s to dst with \, tab, newline and CR escaped.
func appendEscaped(dst, s []byte) []byte {
	for _, b := range s {
		switch b {
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, b)
		}
	}
	return dst
}

// unescape decodes \\, \t, \n and \r in s; any other backslash sequence is
// an error.
func unescape(s []byte) ([]byte, error) {
	if bytes.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b != '\\' {
			out = append(out, b)
			continue
		}
		if i+1 == len(s) {
			return nil, fmt.Errorf(`backslash at the end (write \\ for a backslash)`)
		}
		i++
		switch s[i] {
		case '\\':
			out = append(out, '\\')
		case 't':
			out = append(out, '\t')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		default:
			return nil, fmt.Errorf(`unknown escape \%c (only \\ \t \n \r; write \\ for a backslash)`, s[i])
		}
	}
	return out, nil
}
