package typed

import (
	"fmt"
	"testing"
)

type rvName string
type rvHiddenInner struct{ S string }
type rvStringer interface{ String() string }
type rvStr string

func (s rvStr) String() string { return string(s) }

type rvExotic struct {
	*rvHiddenInner `json:"in"`
	rvStringer
	*rvName
	Anon struct {
		S string `json:"s"`
		fzInner
	}
	IM  any
	MM  map[string]map[fzText]string
	PT  *fzPtrText
	AP  [1]fzPtrText
	ZP  *fzZeroer `json:",omitzero"`
	ZA  any       `json:",omitzero"`
	QA  any       `json:",string"`
	QT  fzText    `json:",string"`
	MB  map[string][]byte
	BA  [2]byte
	PPS **string `json:",string"`
}

// TestJSONExoticFieldsAgreeWithEncodingJSON: fields the differential fuzz
// target does not build (a tagged unexported embedded pointer, an embedded
// interface, anonymous structs, omitzero on pointers and interfaces,
// ",string" on interfaces and text types) get JSON's UTF-8 refusal exactly
// where encoding/json would change a byte, and nowhere else.
func TestJSONExoticFieldsAgreeWithEncodingJSON(t *testing.T) {
	for _, s := range []string{"ok", "\xff", "", "zz", "a\xfe", "\ufffd"} {
		n := rvName(s)
		ps := &s
		var e rvExotic
		vals := []rvExotic{
			{rvHiddenInner: &rvHiddenInner{s}},
			{rvStringer: rvStr(s)},
			{rvName: &n},
			{IM: map[fzIntKey]string{1: "x"}},
			{IM: map[fzIntKey]string{2: s}},
			{MM: map[string]map[fzText]string{"a": {fzText(s): "v"}}},
			{PT: &fzPtrText{s}},
			{AP: [1]fzPtrText{{s}}},
			{ZP: &fzZeroer{s}},
			{ZA: fzZeroer{s}},
			{ZA: &fzPtrZeroer{s}},
			{QA: s},
			{QT: fzText(s)},
			{MB: map[string][]byte{"k": []byte(s)}},
			{PPS: &ps},
		}
		e.Anon.S = s
		vals = append(vals, e)
		e = rvExotic{}
		e.Anon.A = s
		vals = append(vals, e)
		for i, v := range vals {
			fzCheck(t, fmt.Sprintf("%q #%d value", s, i), v)
			fzCheck(t, fmt.Sprintf("%q #%d pointer", s, i), &v)
			fzCheck[any](t, fmt.Sprintf("%q #%d in any", s, i), v)
			fzCheck(t, fmt.Sprintf("%q #%d in slice", s, i), []rvExotic{v})
		}
	}
}
