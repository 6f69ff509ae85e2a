package typed

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"unicode/utf8"
)

// Binary encodes with the type's own MarshalBinary and decodes with
// UnmarshalBinary, for types that define their wire form (time.Time,
// netip.Addr, url.URL...). PT is *T, spelled out so that the pointer
// receiver of UnmarshalBinary is allowed: Binary[time.Time]() infers it.
//
// When *T also implements encoding.BinaryAppender, Append uses it and so
// writes straight into the caller's buffer: time.Time then encodes with no
// allocation (BenchmarkPutBinary). Otherwise the slice MarshalBinary
// returns costs one allocation per value. Decode allocates only what
// UnmarshalBinary does. UnmarshalBinary must copy what it keeps (the
// encoding package's contract), which satisfies Codec's rule that Decode
// keeps nothing of b.
func Binary[T any, PT interface {
	*T
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}]() Codec[T] {
	_, appends := any(PT(nil)).(encoding.BinaryAppender)
	return &binaryCodec[T, PT]{name: reflect.TypeFor[T]().String(), appends: appends}
}

type binaryCodec[T any, PT interface {
	*T
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}] struct {
	name    string // for error messages
	appends bool   // *T implements encoding.BinaryAppender: checked once, not per value

	// values holds *T to call the methods on. The compiler cannot see
	// through a method of a type parameter, so it assumes the receiver
	// escapes: taking &v of a local would heap-allocate a T on every call.
	// A pooled T costs that once per P. Each use clears it before putting
	// it back, so the pool keeps nothing the caller's values point to.
	values sync.Pool
}

func (c *binaryCodec[T, PT]) get() PT {
	if p, ok := c.values.Get().(PT); ok {
		return p
	}
	return PT(new(T))
}

func (c *binaryCodec[T, PT]) put(p PT) {
	var zero T
	*p = zero
	c.values.Put(p)
}

func (c *binaryCodec[T, PT]) Append(dst []byte, v T) ([]byte, error) {
	p := c.get()
	defer c.put(p)
	*p = v
	if c.appends {
		out, err := any(p).(encoding.BinaryAppender).AppendBinary(dst)
		if err != nil {
			return dst, fmt.Errorf("encode %s: %w", c.name, err)
		}
		return out, nil
	}
	b, err := p.MarshalBinary()
	if err != nil {
		return dst, fmt.Errorf("encode %s: %w", c.name, err)
	}
	return append(dst, b...), nil
}

func (c *binaryCodec[T, PT]) Decode(b []byte) (T, error) {
	p := c.get()
	defer c.put(p)
	if err := p.UnmarshalBinary(b); err != nil {
		var zero T
		return zero, &DecodeError{Type: c.name, Len: len(b), Err: err}
	}
	return *p, nil
}

// JSON is the codec of last resort, for any type encoding/json handles:
// easy, readable with mapctl, and tolerant of added fields, but it
// allocates on every Append and Decode and is several times slower than
// the binary codecs (see BenchmarkGetJSON). Decode ignores unknown fields,
// as json.Unmarshal does. As a key codec it works because encoding/json is
// deterministic (struct fields in declaration order, map keys sorted),
// for types whose every field is encoded: unexported fields and fields
// tagged json:"-" are not, so keys that differ only there collide. A
// string that is not valid UTF-8 is refused (encoding/json would replace
// its bad bytes, making two keys one and changing values): use String or
// Bytes for such data.
func JSON[T any]() Codec[T] {
	return jsonCodec[T]{name: reflect.TypeFor[T]().String()}
}

type jsonCodec[T any] struct {
	name string // for error messages
}

func (c jsonCodec[T]) Append(dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("encode %s as JSON: %w", c.name, err)
	}
	if !validUTF8(reflect.ValueOf(v), 0) {
		return dst, fmt.Errorf("encode %s as JSON: a string is not valid UTF-8, which JSON cannot hold unchanged", c.name)
	}
	return append(dst, b...), nil
}

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// validUTF8 reports whether every string encoding/json takes from v (in
// exported and embedded struct fields, elements, map keys and values) is
// valid UTF-8: json replaces the bytes of any other, so that two values
// would encode alike. A type with its own JSON or text encoding is its
// own business. The walk checks the value, not the encoding: an escaped
// U+FFFD there may be a MarshalJSON's own, and a ",string" field escapes
// it twice.
func validUTF8(v reflect.Value, depth int) bool {
	if !v.IsValid() || depth > 100 { // too deep: json.Marshal itself refuses cycles
		return true
	}
	t := v.Type()
	if t.Implements(jsonMarshalerType) || t.Implements(textMarshalerType) ||
		reflect.PointerTo(t).Implements(jsonMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType) {
		return true
	}
	switch v.Kind() {
	case reflect.String:
		return utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		return v.IsNil() || validUTF8(v.Elem(), depth+1)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if (!f.IsExported() && !f.Anonymous) || f.Tag.Get("json") == "-" {
				continue
			}
			if !validUTF8(v.Field(i), depth+1) {
				return false
			}
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return true // []byte: base64
		}
		for i := range v.Len() {
			if !validUTF8(v.Index(i), depth+1) {
				return false
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if !validUTF8(it.Key(), depth+1) || !validUTF8(it.Value(), depth+1) {
				return false
			}
		}
	}
	return true
}

func (c jsonCodec[T]) Decode(b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		var zero T
		return zero, &DecodeError{Type: c.name, Len: len(b), Err: err}
	}
	return v, nil
}
