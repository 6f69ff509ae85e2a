// Package formatdoc lets a package's tests hold docs/FORMAT.md to the
// constants that package lays the file out with: each test names the rows
// a section's field tables must have, and a layout change that leaves the
// document behind fails there.
package formatdoc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Row is a row of a field table: its offset, its size as written (a number
// or a formula), and the start of its field text.
type Row struct {
	Offset int
	Size   string
	Field  string
}

// F is the Row at offset whose size reads size and whose field text starts
// with field.
func F(offset int, size, field string) Row { return Row{Offset: offset, Size: size, Field: field} }

// Doc is docs/FORMAT.md, split at its "### " headings.
type Doc struct {
	Text     string
	sections map[string]string
}

// Load reads docs/FORMAT.md under root, the module's root as a path from
// the test's package directory ("..").
func Load(t testing.TB, root string) *Doc {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "FORMAT.md"))
	if err != nil {
		t.Fatal(err)
	}
	d := &Doc{Text: string(raw), sections: map[string]string{}}
	for _, p := range strings.Split(d.Text, "\n### ")[1:] {
		head, body, _ := strings.Cut(p, "\n")
		if i := strings.Index(head, " ("); i >= 0 {
			head = head[:i]
		}
		if i := strings.Index(body, "\n## "); i >= 0 {
			body = body[:i]
		}
		d.sections[head] = body
	}
	return d
}

// Expect reports an error for every row of want that the section named
// (its heading up to " (") does not have.
func (d *Doc) Expect(t testing.TB, section string, want []Row) {
	t.Helper()
	body, ok := d.sections[section]
	if !ok {
		t.Errorf("docs/FORMAT.md has no section %q", section)
		return
	}
	have := rows(body)
want:
	for _, w := range want {
		for _, h := range have {
			if h.Offset == w.Offset && h.Size == w.Size && strings.HasPrefix(h.Field, w.Field) {
				continue want
			}
		}
		t.Errorf("docs/FORMAT.md, %s: no row | %d | %s | %s...", section, w.Offset, w.Size, w.Field)
	}
}

// Says reports an error for every text the document does not contain.
func (d *Doc) Says(t testing.TB, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if !strings.Contains(d.Text, s) {
			t.Errorf("docs/FORMAT.md does not say %q", s)
		}
	}
}

// rows parses the table rows of body whose first cell is a number.
func rows(body string) []Row {
	var out []Row
	for _, line := range strings.Split(body, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) < 3 {
			continue
		}
		off, err := strconv.Atoi(cells[0])
		if err != nil {
			continue
		}
		out = append(out, F(off, cells[1], cells[2]))
	}
	return out
}
