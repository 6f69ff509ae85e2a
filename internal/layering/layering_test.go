// Package layering holds tests that enforce the architecture of DESIGN.md:
// which packages may import unsafe, and that imports only flow downward.
package layering

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/sharedmap/sharedmap/"

// unsafeAllowed: offheap owns pointer work on the mapping; internal/wait
// needs the address of a word for futex(2) and a linkname for the pause hint.
var unsafeAllowed = map[string]bool{"offheap": true, "internal/wait": true}

// mayImport lists, for each layer, the project packages it may import.
var mayImport = map[string][]string{
	"offheap":           {},
	"internal/wait":     {},
	"internal/keyhash":  {},
	"internal/testhook": {},
	"internal/inflight": {},
	"rwulock":           {"internal/wait"},
	"ipc":               {"internal/wait", "offheap"},
	"internal/registry": {"offheap"},
	"segment":           {"rwulock", "offheap", "internal/wait", "internal/keyhash", "internal/testhook"}, // keyhash: the entry checksum; testhook: where tests stop a process
	"hashmap":           {"segment", "rwulock", "ipc", "offheap", "internal/registry", "internal/wait", "internal/keyhash", "internal/inflight"},
	"cmd/mapctl":        {"hashmap", "rwulock", "ipc", "offheap"},
	"typed":             {"hashmap", "internal/inflight"},
}

func TestLayering(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir // bench/ is its own module
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		test := strings.HasSuffix(path, "_test.go")
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if p == "unsafe" && !unsafeAllowed[rel] {
				t.Errorf("%s imports unsafe; only %v may", path, unsafeAllowed)
			}
			if !strings.HasPrefix(p, module) || test {
				continue // tests may use any package to set up shared files
			}
			dep := strings.TrimPrefix(p, module)
			allowed, known := mayImport[layerOf(rel)]
			if !known {
				continue
			}
			ok := false
			for _, a := range allowed {
				if dep == a || strings.HasPrefix(dep, a+"/") || strings.HasPrefix(dep, layerOf(rel)+"/") {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s imports %s: %s may only import %v", path, dep, layerOf(rel), allowed)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// layerOf maps a directory to its layer: cmd/mapctl/command is cmd/mapctl.
func layerOf(dir string) string {
	for layer := range mayImport {
		if dir == layer || strings.HasPrefix(dir, layer+"/") {
			return layer
		}
	}
	return dir
}
