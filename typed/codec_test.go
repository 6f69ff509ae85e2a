//go:build linux

package typed

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// point implements only MarshalBinary and UnmarshalBinary, to exercise
// Binary's path for types without AppendBinary (time.Time has it).
type point struct{ X, Y int32 }

var errPointLen = errors.New("point: want 8 bytes")

func (p point) MarshalBinary() ([]byte, error) {
	return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(p.X)), uint32(p.Y)), nil
}

func (p *point) UnmarshalBinary(b []byte) error {
	if len(b) != 8 {
		return errPointLen
	}
	p.X, p.Y = int32(binary.LittleEndian.Uint32(b)), int32(binary.LittleEndian.Uint32(b[4:]))
	return nil
}

// record is the JSON test type: nested, with a slice, a map and omitempty.
type record struct {
	Name  string            `json:"name"`
	Age   int               `json:"age,omitempty"`
	Tags  []string          `json:"tags"`
	Attrs map[string]string `json:"attrs,omitempty"`
	Score float64           `json:"score"`
}

// roundTrip encodes each value after a prefix (Append must keep dst's
// bytes), decodes it back and compares with eq.
func roundTrip[T any](t *testing.T, c Codec[T], eq func(a, b T) bool, values ...T) {
	t.Helper()
	prefix := []byte("prefix")
	for _, v := range values {
		enc, err := c.Append(append([]byte(nil), prefix...), v)
		if err != nil {
			t.Errorf("Append(%v): %v", v, err)
			continue
		}
		if !bytes.HasPrefix(enc, prefix) {
			t.Errorf("Append(%v) overwrote dst: %q", v, enc)
			continue
		}
		got, err := c.Decode(enc[len(prefix):])
		if err != nil {
			t.Errorf("Decode(Append(%v)): %v", v, err)
			continue
		}
		if !eq(got, v) {
			t.Errorf("round trip of %v gave %v", v, got)
		}
	}
}

func equal[T comparable](a, b T) bool { return a == b }

func TestCodecRoundTrips(t *testing.T) {
	t.Run("String", func(t *testing.T) {
		roundTrip(t, String(), equal, "", "a", "héllo", "\x00\xff not utf-8", string(make([]byte, 1<<16)))
	})
	t.Run("Bytes", func(t *testing.T) {
		roundTrip(t, Bytes(), bytes.Equal, []byte{}, []byte{0}, []byte("abc"), make([]byte, 1<<16))
	})
	t.Run("Int64", func(t *testing.T) {
		roundTrip(t, Int64(), equal, 0, 1, -1, math.MinInt64, math.MaxInt64)
	})
	t.Run("Uint64", func(t *testing.T) { roundTrip(t, Uint64(), equal, 0, 1, math.MaxUint64) })
	t.Run("Int32", func(t *testing.T) {
		roundTrip(t, Int32(), equal, 0, -1, math.MinInt32, math.MaxInt32)
	})
	t.Run("Uint32", func(t *testing.T) { roundTrip(t, Uint32(), equal, 0, 1, math.MaxUint32) })
	t.Run("Int16", func(t *testing.T) {
		roundTrip(t, Int16(), equal, 0, -1, math.MinInt16, math.MaxInt16)
	})
	t.Run("Uint16", func(t *testing.T) { roundTrip(t, Uint16(), equal, 0, 1, math.MaxUint16) })
	t.Run("Int8", func(t *testing.T) { roundTrip(t, Int8(), equal, 0, -1, math.MinInt8, math.MaxInt8) })
	t.Run("Uint8", func(t *testing.T) { roundTrip(t, Uint8(), equal, 0, 1, math.MaxUint8) })
	t.Run("Float64", func(t *testing.T) {
		sameBits := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
		payloadNaN := math.Float64frombits(0x7ff8_dead_beef_0001)
		roundTrip(t, Float64(), sameBits, 0, math.Copysign(0, -1), 1.5, -2.25, math.MaxFloat64,
			math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1), math.NaN(), payloadNaN)
	})
	t.Run("Bool", func(t *testing.T) { roundTrip(t, Bool(), equal, false, true) })
	t.Run("Binary/appender", func(t *testing.T) {
		if _, ok := any(new(time.Time)).(interface {
			AppendBinary([]byte) ([]byte, error)
		}); !ok {
			t.Fatal("time.Time no longer implements AppendBinary: this test needs another appender type")
		}
		eq := func(a, b time.Time) bool { return a.Equal(b) }
		roundTrip(t, Binary[time.Time](), eq, time.Time{}, time.Unix(0, 0).UTC(),
			time.Date(2024, 2, 29, 23, 59, 59, 999999999, time.FixedZone("", -7*3600)))
	})
	t.Run("Binary/marshaler", func(t *testing.T) {
		roundTrip(t, Binary[point](), equal, point{}, point{math.MinInt32, math.MaxInt32}, point{-1, 1})
	})
	t.Run("JSON", func(t *testing.T) {
		eq := func(a, b record) bool { return reflect.DeepEqual(a, b) }
		roundTrip(t, JSON[record](), eq, record{Tags: []string{}},
			record{Name: "ada", Age: 36, Tags: []string{"x", ""}, Attrs: map[string]string{"b": "2", "a": "1"}, Score: -0.5})
		roundTrip(t, JSON[map[string]int](), func(a, b map[string]int) bool { return reflect.DeepEqual(a, b) },
			map[string]int{"z": 1, "a": 2})
	})
}

// TestBytesNilAndEmpty: both encode to nothing; Decode gives a non-nil
// empty slice and, otherwise, a copy the caller owns.
func TestBytesNilAndEmpty(t *testing.T) {
	c := Bytes()
	for _, v := range [][]byte{nil, {}} {
		enc, err := c.Append(nil, v)
		if err != nil || len(enc) != 0 {
			t.Errorf("Append(%#v) = %q, %v; want nothing", v, enc, err)
		}
	}
	for _, b := range [][]byte{nil, {}} {
		got, err := c.Decode(b)
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("Decode(%#v) = %#v, %v; want non-nil empty", b, got, err)
		}
	}
	src := []byte("abc")
	got, _ := c.Decode(src)
	src[0] = 'X'
	if string(got) != "abc" {
		t.Errorf("Decode kept its input: got %q after the input changed", got)
	}
}

// TestJSONKeysDeterministic: map keys are sorted, so equal maps make equal
// keys whatever their insertion order.
func TestJSONKeysDeterministic(t *testing.T) {
	c := JSON[map[string]int]()
	a, _ := c.Append(nil, map[string]int{"a": 1, "b": 2, "c": 3})
	b, _ := c.Append(nil, map[string]int{"c": 3, "b": 2, "a": 1})
	if !bytes.Equal(a, b) {
		t.Errorf("equal maps encode differently: %s vs %s", a, b)
	}
}

// fixedCodec is a fixed-width codec seen without its type, for tables.
type fixedCodec struct {
	name   string
	size   int
	decode func([]byte) error
}

func fixedOf[T any](name string, size int, c Codec[T]) fixedCodec {
	return fixedCodec{name, size, func(b []byte) error { _, err := c.Decode(b); return err }}
}

var fixedCodecs = []fixedCodec{
	fixedOf("int64", 8, Int64()), fixedOf("uint64", 8, Uint64()),
	fixedOf("int32", 4, Int32()), fixedOf("uint32", 4, Uint32()),
	fixedOf("int16", 2, Int16()), fixedOf("uint16", 2, Uint16()),
	fixedOf("int8", 1, Int8()), fixedOf("uint8", 1, Uint8()),
	fixedOf("float64", 8, Float64()), fixedOf("bool", 1, Bool()),
}

func TestDecodeWrongLength(t *testing.T) {
	for _, c := range fixedCodecs {
		for n := 0; n <= 17; n++ {
			if n == c.size {
				continue
			}
			err := c.decode(make([]byte, n))
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("%s: Decode of %d bytes: %v, want ErrDecode", c.name, n, err)
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Type != c.name || de.Len != n || de.Want != c.size {
				t.Fatalf("%s: Decode of %d bytes: %#v, want a DecodeError naming the type and both lengths", c.name, n, err)
			}
			unit := "bytes"
			if n == 1 {
				unit = "byte"
			}
			want := fmt.Sprintf("typed: cannot decode %s from %d %s (want %d)", c.name, n, unit, c.size)
			if err.Error() != want {
				t.Errorf("%s: message %q, want %q", c.name, err, want)
			}
		}
	}
}

func TestDecodeBadBytes(t *testing.T) {
	check := func(name string, err error, cause error) {
		t.Helper()
		if !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v, want ErrDecode", name, err)
		}
		if cause != nil && !errors.Is(err, cause) {
			t.Errorf("%s: %v does not wrap %v", name, err, cause)
		}
	}
	_, err := Bool().Decode([]byte{2})
	check("Bool(2)", err, errNotBool)
	_, err = Binary[point]().Decode([]byte{1, 2, 3})
	check("Binary[point]", err, errPointLen)
	_, err = Binary[time.Time]().Decode([]byte{0xff, 0, 0})
	check("Binary[time.Time]", err, nil)
	_, err = JSON[record]().Decode([]byte(`{"name": `))
	check("JSON truncated", err, nil)
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) {
		t.Errorf("JSON error %v does not unwrap to *json.SyntaxError", err)
	}
	_, err = JSON[record]().Decode([]byte(`{"age": "old"}`))
	check("JSON wrong type", err, nil)
}

// TestEncodeErrors: values the codec cannot encode fail with an error that
// names the type and is not a decode error, and leave dst as it was.
func TestEncodeErrors(t *testing.T) {
	dst := []byte("keep")
	out, err := JSON[float64]().Append(dst, math.NaN())
	if err == nil || errors.Is(err, ErrDecode) || string(out) != "keep" {
		t.Errorf("JSON NaN: %q, %v; want an encode error and dst unchanged", out, err)
	}
	// time.Time's MarshalBinary refuses zone offsets beyond int16 minutes.
	bad := time.Date(2000, 1, 1, 0, 0, 0, 0, time.FixedZone("", 1<<20*60))
	out, err = Binary[time.Time]().Append(dst, bad)
	if err == nil || string(out) != "keep" {
		t.Errorf("Binary time with offset out of range: %q, %v; want an error and dst unchanged", out, err)
	}
}

// TestJSONRefusesInvalidUTF8: encoding/json replaces bytes that are not
// UTF-8 with U+FFFD, so "\xff" and "\xfe" would be one key, the second Put
// overwriting the first, and such a value would come back changed. Append
// must refuse them; valid strings, U+FFFD itself and backslashes before
// "ufffd" must still encode.
func TestJSONRefusesInvalidUTF8(t *testing.T) {
	c := JSON[string]()
	for _, bad := range []string{"\xff", "a\xfeb", "ok\\\xff"} {
		if _, err := c.Append(nil, bad); err == nil {
			t.Errorf("Append(%q) encoded it", bad)
		}
	}
	for _, good := range []string{"", "plain", "\ufffd", `\ufffd`, `\\ufffd`, "é\ufffdx", `a\"b`} {
		b, err := c.Append(nil, good)
		if err != nil {
			t.Errorf("Append(%q): %v", good, err)
			continue
		}
		if got, err := c.Decode(b); err != nil || got != good {
			t.Errorf("round trip of %q: %q, %v", good, got, err)
		}
	}
	m := New(openRaw(t, 100), JSON[string](), Int64())
	if err := m.Put("\xff", 1); err == nil {
		t.Error("Put of a key that is not UTF-8 succeeded")
	}
	// The check is on the value, not on the encoding: a MarshalJSON's own
	// escaped U+FFFD is fine, and a ",string" field, escaped twice, is
	// checked all the same.
	if _, err := JSON[json.RawMessage]().Append(nil, json.RawMessage(`{"name":"caf\ufffd"}`)); err != nil {
		t.Errorf("a RawMessage holding an escaped U+FFFD: %v", err)
	}
	type quoted struct {
		S string `json:",string"`
	}
	if _, err := JSON[quoted]().Append(nil, quoted{"\xff"}); err == nil {
		t.Error("a ,string field that is not UTF-8 encoded")
	}
	type nested struct {
		M      map[string][]string
		Hidden string `json:"-"`
		P      *string
	}
	bad := "\xfe"
	for _, v := range []nested{{M: map[string][]string{bad: nil}}, {M: map[string][]string{"k": {"ok", bad}}}, {P: &bad}} {
		if _, err := JSON[nested]().Append(nil, v); err == nil {
			t.Errorf("%+v encoded", v)
		}
	}
	if _, err := JSON[nested]().Append(nil, nested{Hidden: bad}); err != nil {
		t.Errorf("a json:\"-\" field, which is not encoded: %v", err)
	}
}

type jsonPtrMarshaler struct{ S string }

func (p *jsonPtrMarshaler) MarshalJSON() ([]byte, error) { return json.Marshal("x") }

type jsonTextKey string

func (k jsonTextKey) MarshalText() ([]byte, error) { return []byte("k"), nil }

type jsonPassText string

func (p jsonPassText) MarshalText() ([]byte, error) { return []byte(p), nil }

type jsonNode struct {
	S    string
	Next *jsonNode
}

type jsonHiddenName string

type jsonWithUnexportedEmbedded struct {
	jsonHiddenName
	A string
}

type jsonShadowed struct {
	jsonInner
	X string
}

type jsonInner struct{ X string }

// TestJSONFollowsEncodingJSONRules: the UTF-8 check follows encoding/json's
// rules for what it encodes: a method on the pointer does not apply to a value that is not addressable, a map
// key of string kind is used as it is, MarshalText's output is a string,
// a value nested past the walk's depth is refused; and unexported embedded
// non-structs and shadowed fields are not encoded, so not checked.
func TestJSONFollowsEncodingJSONRules(t *testing.T) {
	refused := func(name string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: a string that is not UTF-8 was encoded", name)
		}
	}
	_, err := JSON[jsonPtrMarshaler]().Append(nil, jsonPtrMarshaler{"\xff"})
	refused("pointer-receiver MarshalJSON on a value", err)
	_, err = JSON[map[string]jsonPtrMarshaler]().Append(nil, map[string]jsonPtrMarshaler{"k": {"\xff"}})
	refused("pointer-receiver MarshalJSON as a map value", err)
	_, err = JSON[map[jsonTextKey]int]().Append(nil, map[jsonTextKey]int{"\xff": 1})
	refused("a TextMarshaler map key of string kind", err)
	_, err = JSON[jsonPassText]().Append(nil, jsonPassText("\xff"))
	refused("MarshalText output", err)
	defer func(d int) { maxJSONDepth = d }(maxJSONDepth)
	maxJSONDepth = 100
	list := func(last string, n int) *jsonNode {
		l := &jsonNode{S: last}
		for range n {
			l = &jsonNode{S: "ok", Next: l}
		}
		return l
	}
	_, err = JSON[*jsonNode]().Append(nil, list("\xff", 200))
	refused("a value nested past the walk's depth", err)
	if _, err := JSON[*jsonNode]().Append(nil, list("ok", 50)); err != nil {
		t.Errorf("a list within the depth: %v", err)
	}
	if _, err := JSON[*jsonPtrMarshaler]().Append(nil, &jsonPtrMarshaler{"\xff"}); err != nil {
		t.Errorf("MarshalJSON through a pointer is the type's own: %v", err)
	}
	if _, err := JSON[jsonWithUnexportedEmbedded]().Append(nil, jsonWithUnexportedEmbedded{"\xff", "a"}); err != nil {
		t.Errorf("an unexported embedded non-struct, which json leaves out: %v", err)
	}
	if _, err := JSON[jsonShadowed]().Append(nil, jsonShadowed{jsonInner{"\xff"}, "x"}); err != nil {
		t.Errorf("a shadowed field, which json leaves out: %v", err)
	}
	if _, err := JSON[jsonShadowed]().Append(nil, jsonShadowed{jsonInner{"x"}, "\xff"}); err == nil {
		t.Error("the dominant field that is not UTF-8 was encoded")
	}
}

type jsonNilTM struct{ T encoding.TextMarshaler }
type jsonTwiceA struct{ jsonInner }
type jsonTwiceB struct{ jsonInner }
type jsonTwice struct {
	jsonTwiceA
	jsonTwiceB
}
type jsonBadTagShadow struct {
	X string `json:"it's"`
	Y string `json:"X"`
}
type jsonBadTagTwin struct {
	X string `json:"it's"`
	Y string `json:"c'd"`
}
type jsonTextByte byte

func (b jsonTextByte) MarshalText() ([]byte, error) { return []byte{byte(b)}, nil }

type jsonZeroer struct{ S string }

func (z jsonZeroer) IsZero() bool { return z.S == "\xff" }

type jsonOmitZero struct {
	Z jsonZeroer `json:",omitzero"`
}

// TestJSONFollowsEncodingJSONRulesMore: the walk agrees with encoding/json
// on a nil TextMarshaler interface field (no panic), a struct embedded
// twice at one depth (json encodes neither copy), a tag name json finds
// invalid (it keeps the Go name), byte elements with MarshalText (json
// writes them as strings), an omitzero field its own IsZero calls zero
// (json leaves it out), and a long list of valid strings (a list's length
// is no depth).
func TestJSONFollowsEncodingJSONRulesMore(t *testing.T) {
	accepted := func(name string, enc func() ([]byte, error)) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s: panic: %v", name, r)
			}
		}()
		if _, err := enc(); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	accepted("nil TextMarshaler field", func() ([]byte, error) { return JSON[jsonNilTM]().Append(nil, jsonNilTM{}) })
	accepted("a struct embedded twice", func() ([]byte, error) {
		return JSON[jsonTwice]().Append(nil, jsonTwice{jsonTwiceA: jsonTwiceA{jsonInner{"\xff"}}})
	})
	accepted("an invalid tag shadowed", func() ([]byte, error) {
		return JSON[jsonBadTagShadow]().Append(nil, jsonBadTagShadow{X: "\xff", Y: "y"})
	})
	accepted("an omitzero field zero by its IsZero", func() ([]byte, error) {
		return JSON[jsonOmitZero]().Append(nil, jsonOmitZero{jsonZeroer{"\xff"}})
	})
	accepted("a 5,001-node list", func() ([]byte, error) {
		var l *jsonNode
		for range 5001 {
			l = &jsonNode{S: "ok", Next: l}
		}
		return JSON[*jsonNode]().Append(nil, l)
	})
	if _, err := JSON[jsonBadTagTwin]().Append(nil, jsonBadTagTwin{X: "\xff"}); err == nil {
		t.Error("two fields with an invalid tag name: the one json keeps was not checked")
	}
	if _, err := JSON[[]jsonTextByte]().Append(nil, []jsonTextByte{0xff}); err == nil {
		t.Error("byte elements with MarshalText: not checked")
	}
	if _, err := JSON[[1]jsonTextByte]().Append(nil, [1]jsonTextByte{0xff}); err == nil {
		t.Error("an array of byte elements with MarshalText: not checked")
	}
}

type jsonOptional struct {
	Set bool
	V   string
}

func (o *jsonOptional) IsZero() bool { return !o.Set }

type jsonWithOptional struct {
	O jsonOptional `json:",omitzero"`
}

type jsonZeroerIface interface{ IsZero() bool }

type jsonNilZeroer struct{ n int }

func (z *jsonNilZeroer) IsZero() bool { return z.n == 0 }

type jsonWithZeroerIface struct {
	Z jsonZeroerIface `json:",omitzero"`
}

// TestJSONOmitZeroAsEncodingJSON: omitzero with a pointer-receiver IsZero
// on a value that is not addressable applies (json calls it on a copy),
// and an interface holding a nil pointer (zero to json, IsZero not
// called) is left out without a panic.
func TestJSONOmitZeroAsEncodingJSON(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v", r)
		}
	}()
	if _, err := JSON[jsonWithOptional]().Append(nil, jsonWithOptional{O: jsonOptional{V: "\xff"}}); err != nil {
		t.Errorf("a field json leaves out by its pointer IsZero: %v", err)
	}
	if _, err := JSON[jsonWithZeroerIface]().Append(nil, jsonWithZeroerIface{Z: (*jsonNilZeroer)(nil)}); err != nil {
		t.Errorf("a nil pointer in an omitzero interface: %v", err)
	}
	if _, err := JSON[jsonWithOptional]().Append(nil, jsonWithOptional{O: jsonOptional{Set: true, V: "\xff"}}); err == nil {
		t.Error("a set optional that is not UTF-8 was encoded")
	}
}

// jsonLevel is an enum whose valid values start at 1: its MarshalText
// indexes a table and must never see the zero value, which the structs
// below leave out with omitempty.
type jsonLevel int

var jsonLevelNames = []string{"low", "high"}

func (l jsonLevel) MarshalText() ([]byte, error) { return []byte(jsonLevelNames[l-1]), nil }

type jsonEvent struct {
	Name  string
	Level jsonLevel `json:",omitempty"`
}

// jsonBadText is a string whose text form is never UTF-8; json asks for
// it only where omitempty does not leave "" out.
type jsonBadText string

func (jsonBadText) MarshalText() ([]byte, error) { return []byte("\xff"), nil }

type jsonOmitEmpty struct {
	T jsonBadText `json:",omitempty"`
}

// jsonPanicZeroer's IsZero panics: json does not call it on a field that
// omitempty already leaves out (the options combine by OR).
type jsonPanicZeroer []string

func (jsonPanicZeroer) IsZero() bool { panic("IsZero called") }

type jsonOmitBoth struct {
	Z jsonPanicZeroer `json:",omitempty,omitzero"`
}

type jsonOmitEmptyKinds struct {
	S  string             `json:",omitempty"`
	P  *jsonBadText       `json:",omitempty"`
	I  any                `json:",omitempty"`
	M  map[string]string  `json:",omitempty"`
	L  []jsonBadText      `json:",omitempty"`
	A  [0]jsonBadText     `json:",omitempty"`
	St struct{ S string } `json:",omitempty"` // a struct is never empty
}

// TestJSONOmitEmptyAsEncodingJSON: a field encoding/json leaves out by
// omitempty was still checked, so the check called a MarshalText json
// never calls (panicking on an enum's zero value) and refused a value json
// encodes as {}. Each value here must encode as json.Marshal encodes it.
func TestJSONOmitEmptyAsEncodingJSON(t *testing.T) {
	same := func(name string, v any, enc func() ([]byte, error)) {
		t.Helper()
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: json.Marshal: %v", name, err)
		}
		got, err := func() (b []byte, err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return enc()
		}()
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: json.Marshal gives %s; JSON codec gives %q, %v", name, want, got, err)
		}
	}
	ev := jsonEvent{Name: "boot"}
	same("an omitempty enum at zero", ev, func() ([]byte, error) { return JSON[jsonEvent]().Append(nil, ev) })
	ev.Level = 2
	same("an omitempty enum set", ev, func() ([]byte, error) { return JSON[jsonEvent]().Append(nil, ev) })
	same("an omitempty empty text marshaler", jsonOmitEmpty{}, func() ([]byte, error) {
		return JSON[jsonOmitEmpty]().Append(nil, jsonOmitEmpty{})
	})
	same("omitempty and omitzero, empty", jsonOmitBoth{}, func() ([]byte, error) {
		return JSON[jsonOmitBoth]().Append(nil, jsonOmitBoth{})
	})
	same("empty values of each kind", jsonOmitEmptyKinds{}, func() ([]byte, error) {
		return JSON[jsonOmitEmptyKinds]().Append(nil, jsonOmitEmptyKinds{})
	})
	if _, err := JSON[jsonOmitEmpty]().Append(nil, jsonOmitEmpty{T: "x"}); err == nil {
		t.Error("a non-empty omitempty text marshaler that is not UTF-8 was encoded")
	}
	bad := jsonBadText("")
	for name, v := range map[string]jsonOmitEmptyKinds{
		"S":  {S: "\xff"},
		"P":  {P: &bad},
		"I":  {I: "\xff"},
		"M":  {M: map[string]string{"k": "\xff"}},
		"L":  {L: []jsonBadText{""}},
		"St": {St: struct{ S string }{"\xff"}},
	} {
		if _, err := JSON[jsonOmitEmptyKinds]().Append(nil, v); err == nil {
			t.Errorf("omitempty field %s, not empty and not UTF-8, was encoded", name)
		}
	}
}

// jsonOnceText's MarshalText works once, as json.Marshal calls it, and
// panics after: the check must not make a panic of a value json encodes.
type jsonOnceText struct{ calls *int }

func (o jsonOnceText) MarshalText() ([]byte, error) {
	if *o.calls++; *o.calls > 1 {
		panic("MarshalText called twice")
	}
	return []byte("ok"), nil
}

// TestJSONCheckDoesNotPanic: a method that panics in the UTF-8 check, after
// json.Marshal has encoded the value, is an error of Append, not a panic.
func TestJSONCheckDoesNotPanic(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v", r)
		}
	}()
	_, err := JSON[jsonOnceText]().Append(nil, jsonOnceText{calls: new(int)})
	if err == nil || !strings.Contains(err.Error(), "MarshalText called twice") {
		t.Errorf("got %v, want an error with the panic's value", err)
	}
}
