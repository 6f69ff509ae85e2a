package typed

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Binary encodes with the type's own MarshalBinary and decodes with
// UnmarshalBinary, for types that define their wire form (time.Time,
// netip.Addr, url.URL...). PT is *T, spelled out so that the pointer
// receiver of UnmarshalBinary is allowed: Binary[time.Time]() infers it.
//
// When *T implements encoding.BinaryAppender, Append writes straight into
// the caller's buffer (time.Time encodes with no allocation); otherwise
// MarshalBinary's slice costs an allocation per value. UnmarshalBinary must
// copy what it keeps (the encoding package's contract).
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

func (c *binaryCodec[T, PT]) Append(dst []byte, v T) (out []byte, err error) {
	p := c.get()
	defer c.put(p)
	defer func() { // a panic of the type's own method is Append's error, as JSON's is
		if r := recover(); r != nil {
			out, err = dst, fmt.Errorf("encode %s: panic: %v", c.name, r)
		}
	}()
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

func (c *binaryCodec[T, PT]) Decode(b []byte) (v T, err error) {
	p := c.get()
	defer c.put(p)
	defer func() { // an UnmarshalBinary that trusts its input: Decode must not panic
		if r := recover(); r != nil {
			var zero T
			v, err = zero, &DecodeError{Type: c.name, Len: len(b), Err: fmt.Errorf("panic: %v", r)}
		}
	}()
	if err := p.UnmarshalBinary(b); err != nil {
		var zero T
		return zero, &DecodeError{Type: c.name, Len: len(b), Err: err}
	}
	return *p, nil
}

// JSON is the codec of last resort, for any type encoding/json handles:
// easy, readable with mapctl, and tolerant of added fields, but it
// allocates on every Append and Decode and is slower than the binary
// codecs. Decode ignores unknown fields, as json.Unmarshal does. As a key codec it works because encoding/json is
// deterministic (struct fields in declaration order, map keys sorted),
// for types whose every field is encoded: unexported fields and fields
// tagged json:"-" are not, so keys that differ only there collide. Other
// keys that differ encode alike too: an interface{} field holding int64(1)
// or float64(1), an omitempty slice or map nil or empty, a pointer field
// by what it points to, a MarshalJSON or MarshalText type by its output.
// And a key Range decodes must encode as it was stored for Get or Delete
// of it to find the entry: an interface{} field gives back a float64 for
// an integer (one past 2^53 then encodes as another number) and a map for
// a struct (whose fields then come out sorted), so keep interface{} fields
// out of key types. A string that is not valid UTF-8 is refused
// (encoding/json would replace its bad bytes, making two keys one and
// changing values): use String or Bytes for such data. So is a map two of
// whose keys have one MarshalText (json would write both names, in the
// map's random order, and decode one entry).
func JSON[T any]() Codec[T] {
	return jsonCodec[T]{name: reflect.TypeFor[T]().String()}
}

type jsonCodec[T any] struct {
	name string // for error messages
}

func (c jsonCodec[T]) Append(dst []byte, v T) ([]byte, error) {
	b, err := marshalRecovered(v)
	if err != nil {
		return dst, fmt.Errorf("encode %s as JSON: %w", c.name, err)
	}
	switch err := checkUTF8Recovered(reflect.ValueOf(v)); {
	case errors.Is(err, errNotUTF8):
		return dst, fmt.Errorf("encode %s as JSON: a string is not valid UTF-8, which JSON cannot hold unchanged", c.name)
	case err != nil:
		return dst, fmt.Errorf("encode %s as JSON: %w", c.name, err)
	}
	return append(dst, b...), nil
}

// marshalRecovered is json.Marshal with a panic of the type's own methods
// (json passes them through) returned as an error, as checkUTF8Recovered
// does for the check's calls.
func marshalRecovered(v any) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return json.Marshal(v)
}

// checkUTF8Recovered is checkUTF8 of v, with a panic in it returned as an
// error. The check calls the MarshalText and IsZero methods json.Marshal
// has just called without panicking, and no others; but a method may
// panic on a second call, or the walk may yet differ from json's, and
// the check must not turn a value json encodes into a panic.
func checkUTF8Recovered(v reflect.Value) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("checking its strings for UTF-8: panic: %v", r)
		}
	}()
	return checkUTF8(v, 0)
}

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// maxJSONDepth bounds checkUTF8's walk, in pointers, interfaces, maps and
// slices followed; a value nested deeper is refused rather than passed
// unchecked (encoding/json itself looks for cycles past 1,000).
var maxJSONDepth = 100_000 // a variable for tests

var (
	errNotUTF8  = errors.New("a string is not valid UTF-8")
	errDupKey   = errors.New("two map keys have one JSON name (json would write both, in map order, and decode one)")
	errTooDeep  = errors.New("nested too deep in pointers, interfaces, maps and slices to check its strings")
	isZeroerTyp = reflect.TypeFor[interface{ IsZero() bool }]()
)

// checkUTF8 reports errNotUTF8 if a string encoding/json takes from v is
// not valid UTF-8: json replaces the bytes of any other, so that two values
// would encode alike. It follows json's rules for what is encoded and how
// (encode.go): a type's own MarshalJSON is its business, but MarshalText's
// output is a string like any other; a method on the pointer counts only
// where the value is addressable; a map key of string kind is used as it
// is; bytes are base64 unless their type has a marshaler; struct fields
// are those json keeps (see jsonFields), less omitempty fields that are
// empty and omitzero fields that are zero. It checks the value, not the
// encoding: an escaped U+FFFD in a MarshalJSON's output is that type's
// own, and a ",string" field escapes it twice. depth counts the pointers,
// interfaces, maps and slices on the way (errTooDeep past maxJSONDepth).
func checkUTF8(v reflect.Value, depth int) error {
	if !v.IsValid() {
		return nil
	}
	t := v.Type()
	ptrMethods := t.Kind() != reflect.Pointer && v.CanAddr()
	switch {
	case ptrMethods && reflect.PointerTo(t).Implements(jsonMarshalerType), t.Implements(jsonMarshalerType):
		return nil
	case ptrMethods && reflect.PointerTo(t).Implements(textMarshalerType):
		return checkText(v.Addr())
	case t.Implements(textMarshalerType):
		return checkText(v)
	}
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return errNotUTF8
		}
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		if depth >= maxJSONDepth {
			return errTooDeep
		}
		return checkUTF8(v.Elem(), depth+1)
	case reflect.Struct:
		for _, f := range jsonFields(t) {
			fv, ok := fieldByIndex(v, f.index)
			if !ok || f.omitEmpty && isEmptyForJSON(fv) || f.omitZero && isZeroForJSON(fv) {
				continue // json leaves it out, and calls none of its methods
			}
			if err := checkUTF8(fv, depth); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		return checkElemsUTF8(v, depth)
	case reflect.Map:
		return checkMapUTF8(v, depth)
	}
	return nil
}

// checkElemsUTF8 is checkUTF8 of slice or array v: its elements, unless
// json writes it as base64 bytes. A slice is a level of depth.
func checkElemsUTF8(v reflect.Value, depth int) error {
	t := v.Type()
	if e := t.Elem(); t.Kind() == reflect.Slice && e.Kind() == reflect.Uint8 &&
		!reflect.PointerTo(e).Implements(jsonMarshalerType) && !reflect.PointerTo(e).Implements(textMarshalerType) {
		return nil // bytes: base64
	}
	if t.Kind() == reflect.Slice {
		if depth >= maxJSONDepth {
			return errTooDeep
		}
		depth++
	}
	for i := range v.Len() {
		if err := checkUTF8(v.Index(i), depth); err != nil {
			return err
		}
	}
	return nil
}

// checkMapUTF8 is checkUTF8 of map v: its keys as json names them, and its
// values.
func checkMapUTF8(v reflect.Value, depth int) error {
	if depth >= maxJSONDepth {
		return errTooDeep
	}
	// Keys of string kind are distinct strings, and integer keys distinct
	// numbers; keys named by their MarshalText may share a name, which json
	// writes twice, in map order: the encoding then differs from call to
	// call and decodes to one entry.
	var names map[string]bool
	for it := v.MapRange(); it.Next(); {
		k := it.Key()
		switch {
		case k.Kind() == reflect.String:
			if !utf8.ValidString(k.String()) {
				return errNotUTF8
			}
		case k.Type().Implements(textMarshalerType):
			name, err := keyText(k)
			if err != nil {
				return err
			}
			if names == nil {
				names = make(map[string]bool, v.Len())
			}
			if names[name] {
				return fmt.Errorf("%w: %q", errDupKey, name)
			}
			names[name] = true
		}
		if err := checkUTF8(it.Value(), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// checkText reports errNotUTF8 if the text v's MarshalText gives is not
// UTF-8 (json writes it as a string). A nil pointer or interface is null.
func checkText(v reflect.Value) error {
	if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return nil
	}
	m, ok := reflect.TypeAssert[encoding.TextMarshaler](v)
	if !ok {
		return nil
	}
	b, err := m.MarshalText()
	if err == nil && !utf8.Valid(b) { // an error fails json.Marshal itself
		return errNotUTF8
	}
	return nil
}

// keyText is the name json gives map key k by its MarshalText (json's
// resolveKeyName; "" for a nil pointer), errNotUTF8 if it is not UTF-8.
func keyText(k reflect.Value) (string, error) {
	if k.Kind() == reflect.Pointer && k.IsNil() {
		return "", nil
	}
	m, ok := reflect.TypeAssert[encoding.TextMarshaler](k)
	if !ok {
		return "", nil
	}
	b, err := m.MarshalText()
	if err == nil && !utf8.Valid(b) {
		return "", errNotUTF8
	}
	return string(b), nil
}

// isEmptyForJSON is json's test for omitempty (its isEmptyValue): false,
// 0, a nil pointer or interface, an array, map, slice or string of length
// 0. It calls no method of the value.
func isEmptyForJSON(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64,
		reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// isZeroForJSON is json's test for omitzero: the type's own IsZero (on the
// pointer too where the value is addressable), else the zero value.
func isZeroForJSON(v reflect.Value) bool {
	t := v.Type()
	switch {
	case t.Implements(isZeroerTyp):
		if (t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface) && v.IsNil() {
			return true
		}
		if t.Kind() == reflect.Interface && v.Elem().Kind() == reflect.Pointer && v.Elem().IsNil() {
			return true // json: a nil pointer in an interface is zero, IsZero not called
		}
		z, ok := reflect.TypeAssert[interface{ IsZero() bool }](v)
		return ok && z.IsZero()
	case t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(isZeroerTyp):
		if !v.CanAddr() { // json calls it on a copy
			c := reflect.New(t).Elem()
			c.Set(v)
			v = c
		}
		z, ok := reflect.TypeAssert[interface{ IsZero() bool }](v.Addr())
		return ok && z.IsZero()
	}
	return v.IsZero()
}

// fieldByIndex is v.FieldByIndex, reporting false where an embedded
// pointer on the way is nil (json leaves those fields out).
func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	for n, i := range index {
		if n > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(i)
	}
	return v, true
}

// jsonField is a struct field encoding/json encodes: its index path and
// whether it has the omitempty and omitzero options (json leaves the field
// out if either applies).
type jsonField struct {
	index     []int
	omitEmpty bool
	omitZero  bool
}

// jsonFieldCache holds jsonFields' answers, by struct type.
var jsonFieldCache sync.Map // reflect.Type -> []jsonField

// jsonFields returns the fields encoding/json encodes for struct type t,
// as its typeFields chooses them: exported fields and the promoted fields
// of embedded structs (an embedded field of an unexported type that is not
// a struct is left out), none tagged "-", a tag name json finds invalid
// taken as none; and of the fields sharing a name the one at the
// shallowest depth, the tagged one if several are there, and none if that
// does not decide (a struct embedded twice at one depth included).
func jsonFields(t reflect.Type) []jsonField {
	if f, ok := jsonFieldCache.Load(t); ok {
		return f.([]jsonField)
	}
	out := dominantJSONFields(jsonCandidates(t))
	jsonFieldCache.Store(t, out)
	return out
}

// jsonCandidate is a field json could encode, before the fields of one
// name are weighed against each other.
type jsonCandidate struct {
	name      string
	index     []int
	tagged    bool
	omitEmpty bool
	omitZero  bool
}

// jsonCandidates walks struct type t and the structs embedded in it
// breadth first, as json's typeFields does, and returns the fields json
// could encode, in the order found: a field of a struct reached twice at
// one depth is returned twice, which makes its name ambiguous.
func jsonCandidates(t reflect.Type) []jsonCandidate {
	type level struct {
		typ   reflect.Type
		index []int
	}
	var fields []jsonCandidate
	var count map[reflect.Type]int
	current, nextCount := []level{}, map[reflect.Type]int{t: 1}
	next := []level{{typ: t}}
	visited := map[reflect.Type]bool{}
	for len(next) > 0 {
		current, next = next, nil
		count, nextCount = nextCount, map[reflect.Type]int{}
		for _, l := range current {
			if visited[l.typ] {
				continue
			}
			visited[l.typ] = true
			for i := range l.typ.NumField() {
				sf := l.typ.Field(i)
				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if sf.Anonymous {
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !validJSONTagName(name) {
					name = ""
				}
				index := append(slices.Clone(l.index), i)
				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct {
					optList := strings.Split(opts, ",")
					f := jsonCandidate{name: name, index: index, tagged: name != "",
						omitEmpty: slices.Contains(optList, "omitempty"), omitZero: slices.Contains(optList, "omitzero")}
					if f.name == "" {
						f.name = sf.Name
					}
					fields = append(fields, f)
					if count[l.typ] > 1 {
						fields = append(fields, f) // reached twice at one depth: ambiguous
					}
					continue
				}
				nextCount[ft]++
				if nextCount[ft] == 1 {
					next = append(next, level{typ: ft, index: index})
				}
			}
		}
	}
	return fields
}

// dominantJSONFields keeps, of the fields of each name, the one at the
// shallowest depth, the tagged one if several are there, and none if that
// does not decide; the fields come out sorted by name.
func dominantJSONFields(fields []jsonCandidate) []jsonField {
	slices.SortStableFunc(fields, func(a, b jsonCandidate) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if c := len(a.index) - len(b.index); c != 0 {
			return c
		}
		if a.tagged != b.tagged {
			if a.tagged {
				return -1
			}
			return 1
		}
		return 0
	})
	var out []jsonField
	for i := 0; i < len(fields); {
		j := i + 1
		for j < len(fields) && fields[j].name == fields[i].name {
			j++
		}
		group := fields[i:j]
		if len(group) == 1 || len(group[0].index) < len(group[1].index) || group[0].tagged != group[1].tagged {
			out = append(out, jsonField{index: group[0].index, omitEmpty: group[0].omitEmpty, omitZero: group[0].omitZero})
		}
		i = j
	}
	return out
}

// validJSONTagName is encoding/json's isValidTag: a name it takes from a
// tag; any other it ignores, and the field keeps its Go name.
func validJSONTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
			// Backslash and quote chars are reserved, but otherwise any
			// punctuation chars are allowed in a tag name.
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

func (c jsonCodec[T]) Decode(b []byte) (v T, err error) {
	// json.Unmarshal panics for some types (a tagged embedded pointer to
	// an unexported struct) and a type's UnmarshalJSON may: Decode must
	// not, whatever b holds.
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, &DecodeError{Type: c.name, Len: len(b), Err: fmt.Errorf("panic: %v", r)}
		}
	}()
	if err := json.Unmarshal(b, &v); err != nil {
		var zero T
		return zero, &DecodeError{Type: c.name, Len: len(b), Err: err}
	}
	return v, nil
}
