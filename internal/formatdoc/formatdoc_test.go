package formatdoc

import (
	"strings"
	"testing"
)

const sample = `# Format

## 3. Fields

### 3.4 Registry (somewhere)

Area header (64 bytes):

| offset | size | field |
|---|---|---|
| 24 | 8 | generation |
| 40 | 24 | reserved |

Slot i is at area + 64:

| offset | size | field |
|---|---|---|
| 24 | 8 | generation at claim |
| 40 | 24 | reserved |
| 64 | 1024 | journal |

### 3.6 Segment header

| offset | size | field |
|---|---|---|
| 0 | 8 | lock word |
`

// recorder is a testing.TB that records its errors instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) { r.errs = append(r.errs, format) }
func (r *recorder) Helper()                           {}

// TestExpectMatchesOnlyTheNamedTable: a row that only the neighbouring
// table of a section has does not satisfy the named one, a caption that
// names no table or two is an error, and a table right after its heading
// is named by "".
func TestExpectMatchesOnlyTheNamedTable(t *testing.T) {
	d, err := Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		section, caption string
		rows             []Row
		errs             int
	}{
		{"3.4 Registry", "Area header", []Row{F(24, "8", "generation"), F(40, "24", "reserved")}, 0},
		{"3.4 Registry", "Slot i is at", []Row{F(24, "8", "generation at claim"), F(64, "1024", "journal")}, 0},
		{"3.4 Registry", "Area header", []Row{F(64, "1024", "journal")}, 1},          // the slot table's row
		{"3.4 Registry", "Area header", []Row{F(24, "8", "generation at claim")}, 1}, // likewise
		{"3.4 Registry", "Nothing", []Row{F(24, "8", "generation")}, 1},
		{"3.4 Registry", "", []Row{F(24, "8", "generation")}, 1}, // neither table follows the heading
		{"3.6 Segment header", "", []Row{F(0, "8", "lock word")}, 0},
		{"3.6 Segment header", "", []Row{F(0, "4", "lock word")}, 1},
		{"3.9 Tier", "", nil, 1},
	} {
		r := &recorder{TB: t}
		d.Expect(r, c.section, c.caption, c.rows)
		if len(r.errs) != c.errs {
			t.Errorf("Expect(%q, %q, %v): %d errors %q, want %d", c.section, c.caption, c.rows, len(r.errs), r.errs, c.errs)
		}
	}
}

// TestParseRefusesTwoSectionsOfOneName: the second would hide the first.
func TestParseRefusesTwoSectionsOfOneName(t *testing.T) {
	if _, err := Parse(sample + "\n### 3.6 Segment header (again)\n\n| 0 | 8 | x |\n"); err == nil || !strings.Contains(err.Error(), "two sections") {
		t.Fatalf("Parse of a repeated heading: %v", err)
	}
}
