package hashmap

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"unicode/utf8"
)

// A fill token is the value of a placeholder entry (expiry segment.Hidden)
// that a cache map holds under a key while one process loads it (see
// GetOrLoad). Every reader takes it for an absent key; every write of the
// key replaces or removes it, which is how a Put or a Delete during a load
// keeps the load from storing its value. Its value, little-endian:
//
//	offset size field
//	0      4    state: tokenLoading or tokenFailed
//	4      4    the loader's registry slot
//	8      8    that slot's generation when the loader's Map joined (registry slot word 24)
//	16     8    load id: random, never 0, new for every load
//	24     n    tokenFailed: the load's error, as text, at most maxFailureText bytes
//
// docs/FORMAT.md section 3.12 holds the same table.
const (
	tokenState      = 0
	tokenSlot       = 4
	tokenGeneration = 8
	tokenID         = 16
	tokenHeaderSize = 24

	tokenLoading = 1 // a load is in flight
	tokenFailed  = 2 // the load failed; its waiters read why, the next caller loads again

	// maxFailureText bounds the error text a failed token carries: enough
	// for a message that names its cause, small enough to take little of
	// a segment.
	maxFailureText = 256
)

// fillToken is a decoded fill token.
type fillToken struct {
	state      uint32
	slot       uint32
	generation uint64
	id         uint64
	failure    string // tokenFailed: the load's error text
}

// newToken is a loading token of a new load by the process whose registry
// slot is slot, joined at generation.
func newToken(slot uint32, generation uint64) fillToken {
	id := rand.Uint64()
	for id == 0 {
		id = rand.Uint64()
	}
	return fillToken{state: tokenLoading, slot: slot, generation: generation, id: id}
}

// failed is t once its load failed with the error text why, cut to
// maxFailureText bytes at a character's start.
func (t fillToken) failed(why string) fillToken {
	if len(why) > maxFailureText {
		why = why[:maxFailureText]
		for len(why) > 0 && !utf8.ValidString(why) {
			why = why[:len(why)-1]
		}
	}
	t.state, t.failure = tokenFailed, strings.ToValidUTF8(why, "?")
	return t
}

func (t fillToken) encode() []byte {
	b := make([]byte, tokenHeaderSize, tokenHeaderSize+len(t.failure))
	le := binary.LittleEndian
	le.PutUint32(b[tokenState:], t.state)
	le.PutUint32(b[tokenSlot:], t.slot)
	le.PutUint64(b[tokenGeneration:], t.generation)
	le.PutUint64(b[tokenID:], t.id)
	return append(b, t.failure...)
}

// decodeToken reads the value of a placeholder entry as a fill token of a
// map whose registry has slots slots. ok is false for anything else: a
// placeholder some other writer keeps, or damage. Such an entry names no
// load in flight, and GetOrLoad takes it over.
func decodeToken(b []byte, slots int) (t fillToken, ok bool) {
	if len(b) < tokenHeaderSize {
		return fillToken{}, false
	}
	le := binary.LittleEndian
	t = fillToken{state: le.Uint32(b[tokenState:]), slot: le.Uint32(b[tokenSlot:]),
		generation: le.Uint64(b[tokenGeneration:]), id: le.Uint64(b[tokenID:])}
	switch {
	case t.id == 0 || int64(t.slot) >= int64(slots):
		return fillToken{}, false
	case t.state == tokenLoading && len(b) == tokenHeaderSize:
		return t, true
	case t.state == tokenFailed && len(b) <= tokenHeaderSize+maxFailureText:
		t.failure = string(b[tokenHeaderSize:])
		return t, true
	}
	return fillToken{}, false
}
