package layering

import (
	"go/importer"
	"go/token"
	"go/types"
	"strings"
	"testing"
)

// publicAPI lists the packages whose exported names are the module's
// promise to its users. None of them may name in that promise a type of
// another package of the module: a type of segment, offheap, ipc or
// internal/registry in hashmap's API would make every exported name of
// that package a promise too. typed builds on hashmap, so it may name
// hashmap's types.
var publicAPI = map[string][]string{
	"hashmap": {},
	"typed":   {"hashmap"},
}

// TestPublicAPINamesNoLowerPackage type-checks each public package from
// its source and walks everything it exports: the types of exported
// constants and variables, exported functions' and methods' parameters
// and results, exported struct fields, embedded types and interface
// methods. It fails for each one that names a type of a package of the
// module other than the package itself and those it may build on.
// Values stay free: an exported error variable may be a lower package's
// sentinel (hashmap.ErrFull is segment's), as its type is error.
func TestPublicAPINamesNoLowerPackage(t *testing.T) {
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "source", nil)
	for pkg, allowed := range publicAPI {
		p, err := imp.Import(module + pkg)
		if err != nil {
			t.Fatalf("load %s: %v", pkg, err)
		}
		a := apiWalk{t: t, pkg: pkg, seen: map[types.Type]bool{}}
		a.allowed = map[string]bool{module + pkg: true}
		for _, dep := range allowed {
			a.allowed[module+dep] = true
		}
		scope := p.Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			switch obj := obj.(type) {
			case *types.TypeName:
				a.named(name, obj.Type())
			default: // constants, variables and functions
				a.walk(name, obj.Type())
			}
		}
	}
}

// apiWalk looks through the types one public package exports.
type apiWalk struct {
	t       *testing.T
	pkg     string
	allowed map[string]bool // package paths the API may name
	seen    map[types.Type]bool
}

// named checks an exported type: its definition and its exported methods.
func (a *apiWalk) named(where string, typ types.Type) {
	a.walk(where, typ)
	ms := types.NewMethodSet(types.NewPointer(typ))
	for i := range ms.Len() {
		if m := ms.At(i).Obj(); m.Exported() {
			a.walk(where+"."+m.Name(), m.Type())
		}
	}
}

// walk reports every type of another module package that typ names,
// looking into the package's own types (exported or not) but not into
// types of other packages.
func (a *apiWalk) walk(where string, typ types.Type) {
	if a.seen[typ] {
		return
	}
	a.seen[typ] = true
	switch t := typ.(type) {
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() == nil {
			return // error and the other predeclared types
		}
		path := obj.Pkg().Path()
		if strings.HasPrefix(path, module) && !a.allowed[path] {
			a.t.Errorf("%s.%s names %s.%s: the package's API names no type of %s", a.pkg, where, path, obj.Name(), strings.TrimPrefix(path, module))
			return
		}
		if !a.allowed[path] {
			return // the standard library's, or a dependency's
		}
		for i := range t.TypeArgs().Len() {
			a.walk(where, t.TypeArgs().At(i))
		}
		a.walk(where, t.Underlying())
	case *types.Alias:
		a.walk(where, types.Unalias(t))
	case *types.Pointer:
		a.walk(where, t.Elem())
	case *types.Slice:
		a.walk(where, t.Elem())
	case *types.Array:
		a.walk(where, t.Elem())
	case *types.Map:
		a.walk(where, t.Key())
		a.walk(where, t.Elem())
	case *types.Chan:
		a.walk(where, t.Elem())
	case *types.Signature:
		a.walk(where, t.Params())
		a.walk(where, t.Results())
	case *types.Tuple:
		for i := range t.Len() {
			a.walk(where, t.At(i).Type())
		}
	case *types.Struct:
		for i := range t.NumFields() {
			if f := t.Field(i); f.Exported() || f.Embedded() {
				a.walk(where+"."+f.Name(), f.Type())
			}
		}
	case *types.Interface:
		for i := range t.NumMethods() {
			if m := t.Method(i); m.Exported() {
				a.walk(where+"."+m.Name(), m.Type())
			}
		}
		for i := range t.NumEmbeddeds() {
			a.walk(where, t.EmbeddedType(i))
		}
	case *types.TypeParam:
		a.walk(where, t.Constraint())
	case *types.Union:
		for i := range t.Len() {
			a.walk(where, t.Term(i).Type())
		}
	}
}
