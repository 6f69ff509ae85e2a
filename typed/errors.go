package typed

import (
	"errors"
	"fmt"
)

// ErrDecode is what every decode failure matches with errors.Is, whatever
// the codec: the stored bytes are not an encoding of the type asked for.
// It usually means two processes disagree on a map's codecs, or that
// something wrote the key through the raw hashmap API. The entry is left as
// it is; overwrite it with Put or remove it with Delete.
var ErrDecode = errors.New("sharedmap: stored bytes do not decode as the codec's type")

// DecodeError carries what a log line needs to find the culprit: the type
// the codec wanted and how many bytes it was given. Codecs return it
// (always as a pointer); it matches ErrDecode and unwraps to the
// underlying decoder's error, if any.
type DecodeError struct {
	Type string // the Go type being decoded, e.g. "int64" or "time.Time"
	Len  int    // how many bytes Decode was given
	Want int    // the fixed width the type needs; 0 for variable-width types
	Err  error  // the decoder's own error (UnmarshalBinary, encoding/json, a bad byte), or nil
}

// Error reads "typed: cannot decode T from N bytes (want W): cause".
func (e *DecodeError) Error() string {
	unit := "bytes"
	if e.Len == 1 {
		unit = "byte"
	}
	s := fmt.Sprintf("typed: cannot decode %s from %d %s", e.Type, e.Len, unit)
	if e.Want > 0 && e.Len != e.Want {
		s += fmt.Sprintf(" (want %d)", e.Want)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes every DecodeError match ErrDecode, so callers need not know
// which codec failed to tell a decode failure from an I/O or lock error.
func (e *DecodeError) Is(target error) bool { return target == ErrDecode }

// Unwrap exposes the decoder's own error (a *json.SyntaxError, say).
func (e *DecodeError) Unwrap() error { return e.Err }
