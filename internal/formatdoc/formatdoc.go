// Package formatdoc lets a package's tests hold docs/FORMAT.md to the
// constants that package lays the file out with: each test names the rows
// one of the document's field tables must have, and a layout change that
// leaves the document behind fails there.
package formatdoc

import (
	"fmt"
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

// table is one Markdown table of a section: the paragraph just before it
// (its caption; empty when the table follows the heading directly) and its
// rows whose first cell is a number.
type table struct {
	caption string
	rows    []Row
}

// Doc is docs/FORMAT.md, its "### " sections split into tables.
type Doc struct {
	Text     string
	sections map[string][]table
}

// Load reads and parses docs/FORMAT.md under root, the module's root as a
// path from the test's package directory ("..").
func Load(t testing.TB, root string) *Doc {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "FORMAT.md"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Parse splits text at its "### " headings, named by the heading's text up
// to the first " (", and each section into its tables. Two sections of one
// name are an error: one would hide the other.
func Parse(text string) (*Doc, error) {
	d := &Doc{Text: text, sections: map[string][]table{}}
	for _, p := range strings.Split(text, "\n### ")[1:] {
		head, body, _ := strings.Cut(p, "\n")
		if i := strings.Index(head, " ("); i >= 0 {
			head = head[:i]
		}
		if i := strings.Index(body, "\n## "); i >= 0 {
			body = body[:i]
		}
		if _, dup := d.sections[head]; dup {
			return nil, fmt.Errorf("docs/FORMAT.md has two sections %q", head)
		}
		d.sections[head] = tables(body)
	}
	return d, nil
}

// Expect reports an error for every row of want that the table of the
// section named has not. The table is the one whose caption contains
// caption ("" names a table that follows its heading directly); there must
// be exactly one, so that rows are never matched in a neighbouring table
// with the same offsets.
func (d *Doc) Expect(t testing.TB, section, caption string, want []Row) {
	t.Helper()
	tabs, ok := d.sections[section]
	if !ok {
		t.Errorf("docs/FORMAT.md has no section %q", section)
		return
	}
	var found []table
	for _, tab := range tabs {
		if caption == "" && tab.caption == "" || caption != "" && strings.Contains(tab.caption, caption) {
			found = append(found, tab)
		}
	}
	if len(found) != 1 {
		t.Errorf("docs/FORMAT.md, %s: %d tables captioned %q, want 1", section, len(found), caption)
		return
	}
want:
	for _, w := range want {
		for _, h := range found[0].rows {
			if h.Offset == w.Offset && h.Size == w.Size && strings.HasPrefix(h.Field, w.Field) {
				continue want
			}
		}
		t.Errorf("docs/FORMAT.md, %s, table %q: no row | %d | %s | %s...", section, caption, w.Offset, w.Size, w.Field)
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

// tables splits a section's body into its tables, each with the paragraph
// before it as its caption.
func tables(body string) []table {
	var out []table
	var para []string // the last paragraph, until a table takes it
	inTable, afterBlank := false, false
	for _, line := range strings.Split(body, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "|"):
			if !inTable {
				out = append(out, table{caption: strings.Join(para, " ")})
				para, inTable = nil, true
			}
			if r, ok := row(trimmed); ok {
				out[len(out)-1].rows = append(out[len(out)-1].rows, r)
			}
		case trimmed == "":
			inTable, afterBlank = false, true
		default:
			if afterBlank || inTable {
				para = nil
			}
			para = append(para, trimmed)
			inTable, afterBlank = false, false
		}
	}
	return out
}

// row parses a table row whose first cell is a number.
func row(line string) (Row, bool) {
	cells := strings.Split(strings.Trim(line, "| "), " | ")
	if len(cells) < 3 {
		return Row{}, false
	}
	off, err := strconv.Atoi(cells[0])
	if err != nil {
		return Row{}, false
	}
	return F(off, cells[1], cells[2]), true
}
