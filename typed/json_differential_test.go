package typed

// A differential fuzz test of JSON[T] against encoding/json: Append must
// fail exactly when json.Marshal replaces a byte that is not UTF-8 (it
// then writes the escape \ufffd, which the builders below make impossible
// otherwise: fuzzed strings lose their backslashes, and the MarshalJSON
// types never write an escape), and must otherwise give json.Marshal's
// bytes.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// fzText: a string kind with a value MarshalText giving itself.
type fzText string

func (t fzText) MarshalText() ([]byte, error) { return []byte(t), nil }

// fzPtrText: a struct whose MarshalText is on the pointer; json uses it
// only where the value is addressable, and encodes {"S":...} elsewhere.
type fzPtrText struct{ S string }

func (t *fzPtrText) MarshalText() ([]byte, error) { return []byte("p:" + t.S), nil }
func (t *fzPtrText) UnmarshalText(b []byte) error {
	t.S = strings.TrimPrefix(string(b), "p:")
	return nil
}

// fzIntKey: an int kind with MarshalText (as a map key json uses the text);
// odd values give text that is not UTF-8.
type fzIntKey int

func (k fzIntKey) MarshalText() ([]byte, error) {
	if k%2 != 0 {
		return []byte("\xff" + strconv.Itoa(int(k))), nil
	}
	return []byte(strconv.Itoa(int(k))), nil
}
func (k *fzIntKey) UnmarshalText(b []byte) error {
	n, err := strconv.Atoi(strings.TrimPrefix(string(b), "\xff"))
	*k = fzIntKey(n)
	return err
}

// fzStructKey: a struct map key by its text.
type fzStructKey struct{ S string }

func (k fzStructKey) MarshalText() ([]byte, error) { return []byte(k.S), nil }
func (k *fzStructKey) UnmarshalText(b []byte) error {
	k.S = string(b)
	return nil
}

// fzJSONVal: a value MarshalJSON writing hex (never an escape).
type fzJSONVal struct{ S string }

func (j fzJSONVal) MarshalJSON() ([]byte, error) {
	return []byte(`"` + hex.EncodeToString([]byte(j.S)) + `"`), nil
}

// fzJSONPtr: a pointer MarshalJSON writing its string raw (bad bytes and
// all: json's compact keeps them); quotes and control bytes dropped.
type fzJSONPtr struct{ S string }

func (j *fzJSONPtr) MarshalJSON() ([]byte, error) {
	var b []byte // bad bytes kept raw
	for i := 0; i < len(j.S); i++ {
		c := j.S[i]
		if c == '"' || c == '\\' || c < 0x20 {
			continue
		}
		b = append(b, c)
	}
	return append(append([]byte{'"'}, b...), '"'), nil
}

// fzZeroer: IsZero on the value; fzPtrZeroer: on the pointer.
type fzZeroer struct{ S string }

func (z fzZeroer) IsZero() bool { return len(z.S)%3 == 0 }

type fzPtrZeroer struct{ S string }

func (z *fzPtrZeroer) IsZero() bool { return z.S == "" || z.S[0] == 'z' }

type fzTextByte byte

func (b fzTextByte) MarshalText() ([]byte, error) { return []byte{byte(b)}, nil }

type fzInner struct {
	A string
	B string `json:"b,omitempty"`
	T fzText `json:",omitempty"`
}

type fzHidden struct {
	H string
	X string
}

type fzDeep struct {
	fzInner
	D string
}

type fzTwinA struct{ W string }
type fzTwinB struct{ W string }

type fzRich struct {
	fzInner  // A, b, T at depth 1... shadowed by A below
	*fzDeep  // D; its fzInner's fields are deeper
	fzHidden // unexported type: H, X (X shadowed by Y's tag)
	fzTwinA  // W twice at one depth: neither encoded
	fzTwinB
	X    string  `json:"A"`
	Y    string  `json:"X"`
	Skip string  `json:"-"`
	Dash string  `json:"-,"`
	Q    string  `json:",string"`
	QP   *string `json:",string,omitempty"`
	P    *string
	PP   **string `json:",omitempty"`
	I    any      `json:",omitempty"`
	IS   []any
	MS   map[string]any    `json:",omitempty"`
	MT   map[fzText]string `json:",omitempty"`
	MI   map[fzIntKey]string
	MK   map[fzStructKey]int
	MP   map[*fzPtrText]string `json:",omitempty"`
	MN   map[int]string
	Bs   []byte
	BsT  []fzTextByte `json:",omitempty"`
	Arr  [2]string
	TV   fzText
	TP   fzPtrText
	TPs  []fzPtrText
	MTP  map[string]fzPtrText
	JV   fzJSONVal
	JP   fzJSONPtr
	JPs  []fzJSONPtr
	Z    fzZeroer                   `json:",omitzero"`
	ZP   fzPtrZeroer                `json:",omitzero"`
	ZI   interface{ IsZero() bool } `json:",omitzero"`
	E    string                     `json:",omitempty"`
	Bad  string                     `json:"it's"`
}

func fzClean(s string) string { return strings.ReplaceAll(s, `\`, "/") }

// fzBuild makes a fzRich from three strings, sel choosing which fields
// hold which.
func fzBuild(sel uint64, a, b, c string) fzRich {
	a, b, c = fzClean(a), fzClean(b), fzClean(c)
	strs := []string{a, b, c, "", "ok", "z" + a}
	pick := func() string {
		s := strs[sel%uint64(len(strs))]
		sel /= uint64(len(strs))
		if sel == 0 {
			sel = uint64(len(a)*7 + len(b)*3 + len(c))
		}
		return s
	}
	bit := func() bool {
		v := sel&1 == 1
		sel >>= 1
		if sel == 0 {
			sel = uint64(len(a) + len(b)*5 + len(c)*11 + 1)
		}
		return v
	}
	var r fzRich
	r.fzInner = fzInner{A: pick(), B: pick(), T: fzText(pick())}
	if bit() {
		r.fzDeep = &fzDeep{fzInner: fzInner{A: pick(), B: pick()}, D: pick()}
	}
	r.fzHidden = fzHidden{H: pick(), X: pick()}
	r.fzTwinA.W, r.fzTwinB.W = pick(), pick()
	r.X, r.Y, r.Skip, r.Dash, r.Q = pick(), pick(), pick(), pick(), pick()
	if bit() {
		s := pick()
		r.QP = &s
	}
	if bit() {
		s := pick()
		r.P = &s
		if bit() {
			r.PP = &r.P
		}
	}
	switch sel % 7 {
	case 0:
		r.I = pick()
	case 1:
		r.I = fzText(pick())
	case 2:
		r.I = fzPtrText{pick()} // in an interface: not addressable, a struct
	case 3:
		r.I = &fzPtrText{pick()}
	case 4:
		r.I = []fzPtrText{{pick()}}
	case 5:
		r.I = map[string]any{pick(): []any{pick(), 1.5}}
	}
	sel /= 7
	r.IS = []any{pick(), fzJSONVal{pick()}, nil, []byte(pick())}
	if bit() {
		r.MS = map[string]any{pick(): pick(), pick(): fzPtrText{pick()}}
	}
	if bit() {
		r.MT = map[fzText]string{fzText(pick()): pick()}
	}
	if bit() {
		r.MI = map[fzIntKey]string{fzIntKey(len(pick())): pick()}
	}
	if bit() {
		r.MK = map[fzStructKey]int{{pick()}: 1, {pick()}: 2}
	}
	if bit() {
		r.MP = map[*fzPtrText]string{{pick()}: pick()}
		if bit() {
			r.MP[nil] = pick()
		}
	}
	if bit() {
		r.MN = map[int]string{len(pick()): pick()}
	}
	r.Bs = []byte(pick())
	if bit() {
		for _, c := range []byte(pick()) {
			r.BsT = append(r.BsT, fzTextByte(c))
		}
	}
	r.Arr = [2]string{pick(), pick()}
	r.TV, r.TP = fzText(pick()), fzPtrText{pick()}
	r.TPs = []fzPtrText{{pick()}}
	if bit() {
		r.MTP = map[string]fzPtrText{"k": {pick()}}
	}
	r.JV, r.JP = fzJSONVal{pick()}, fzJSONPtr{pick()}
	r.JPs = []fzJSONPtr{{pick()}}
	r.Z, r.ZP = fzZeroer{pick()}, fzPtrZeroer{pick()}
	switch sel % 4 {
	case 0:
		r.ZI = fzZeroer{pick()}
	case 1:
		r.ZI = &fzPtrZeroer{pick()}
	case 2:
		r.ZI = (*fzPtrZeroer)(nil)
	}
	sel /= 4
	r.E, r.Bad = pick(), pick()
	return r
}

// fzCheck is the property for one value of type T.
func fzCheck[T any](t *testing.T, name string, v T) {
	t.Helper()
	want, jerr := json.Marshal(v)
	var got []byte
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: Append panicked: %v", name, r)
			}
		}()
		got, err = JSON[T]().Append([]byte("pre"), v)
	}()
	if jerr != nil {
		if err == nil {
			t.Fatalf("%s: json.Marshal failed (%v), Append did not", name, jerr)
		}
		return
	}
	replaced := bytes.Contains(want, []byte(`\ufffd`))
	switch {
	case replaced && err == nil:
		t.Fatalf("%s: json.Marshal replaced bad bytes, Append accepted:\n%s", name, want)
	case !replaced && err != nil:
		t.Fatalf("%s: json.Marshal kept every string, Append refused: %v\n%q", name, err, want)
	case err == nil && !bytes.Equal(got, append([]byte("pre"), want...)):
		t.Fatalf("%s: Append gave %q, json.Marshal %q", name, got, want)
	case err == nil && string(got[:3]) != "pre":
		t.Fatalf("%s: Append changed dst", name)
	case err != nil && string(got) != "pre":
		t.Fatalf("%s: Append failed but changed dst: %q", name, got)
	}
	if err != nil {
		return
	}
	dv, derr := JSON[T]().Decode(got[3:])
	var uv T
	uerr := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("json.Unmarshal panicked: %v", r)
			}
		}()
		return json.Unmarshal(want, &uv)
	}()
	if (derr == nil) != (uerr == nil) {
		t.Fatalf("%s: Decode error %v, json.Unmarshal error %v", name, derr, uerr)
	}
	if derr == nil && !reflect.DeepEqual(dv, uv) {
		t.Fatalf("%s: Decode gave %#v, json.Unmarshal %#v", name, dv, uv)
	}
}

func FuzzJSONAgainstEncodingJSON(f *testing.F) {
	for _, s := range [][3]string{
		{"", "", ""}, {"a", "b", "c"}, {"\xff", "ok", "z"}, {"é", "\ufffd", "a\xfeb"},
		{"zz\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80"}, {"<>&", "\u2028", "\x00\x1f"},
	} {
		for _, sel := range []uint64{0, 1, 2, 3, 12345, 1 << 40, ^uint64(0)} {
			f.Add(sel, s[0], s[1], s[2])
		}
	}
	f.Fuzz(func(t *testing.T, sel uint64, a, b, c string) {
		r := fzBuild(sel, a, b, c)
		fzCheck(t, "fzRich", r)
		fzCheck(t, "*fzRich", &r)
		fzCheck[any](t, "any(fzRich)", r)
		fzCheck(t, "[]fzRich", []fzRich{r})
		fzCheck(t, "map[string]fzRich", map[string]fzRich{fzClean(c): r})
		fzCheck(t, "[1]fzRich", [1]fzRich{r})
		fzCheck(t, "fzInner", r.fzInner)
		fzCheck(t, "map[fzIntKey]fzPtrText", map[fzIntKey]fzPtrText{fzIntKey(len(a)): {fzClean(b)}})
		fzCheck(t, "[]any", []any{fzClean(a), r.I, r.ZI})
		fzCheck(t, "string", fzClean(a))
	})
}

// TestJSONAgainstEncodingJSON runs the seeds as a plain test too.
func TestJSONAgainstEncodingJSON(t *testing.T) {
	for sel := uint64(0); sel < 2000; sel += 7 {
		for _, s := range [][3]string{{"a", "b", "c"}, {"\xff", "ok", "z"}, {"é", "\ufffd", "a\xfeb"}} {
			t.Run(fmt.Sprint(sel, s), func(t *testing.T) {
				r := fzBuild(sel, s[0], s[1], s[2])
				fzCheck(t, "fzRich", r)
				fzCheck(t, "*fzRich", &r)
				fzCheck[any](t, "any(fzRich)", r)
				fzCheck(t, "[]fzRich", []fzRich{r})
			})
		}
	}
}
