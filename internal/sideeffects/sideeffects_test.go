// Package sideeffects holds a test that importing the module's packages
// changes nothing in the importing program: in particular, that none
// registers an HTTP handler on http.DefaultServeMux (as importing expvar
// registers /debug/vars, and net/http/pprof /debug/pprof/), which a
// program serving that mux would expose without having asked for it. The
// test binary imports the packages and nothing that registers handlers
// itself.
package sideeffects

import (
	"net/http"
	"net/http/httptest"
	"testing"

	_ "github.com/sharedmap/sharedmap/hashmap"
	_ "github.com/sharedmap/sharedmap/internal/registry"
	_ "github.com/sharedmap/sharedmap/ipc"
	_ "github.com/sharedmap/sharedmap/offheap"
	_ "github.com/sharedmap/sharedmap/rwulock"
	_ "github.com/sharedmap/sharedmap/segment"
	_ "github.com/sharedmap/sharedmap/typed"
)

// TestImportsRegisterNoHandler: after importing every package of the
// module, http.DefaultServeMux handles none of the paths that debugging
// packages register.
func TestImportsRegisterNoHandler(t *testing.T) {
	for _, path := range []string{"/debug/vars", "/debug/pprof/", "/metrics", "/"} {
		if _, pattern := http.DefaultServeMux.Handler(httptest.NewRequest(http.MethodGet, path, nil)); pattern != "" {
			t.Errorf("http.DefaultServeMux handles %s with pattern %q: an import registered it", path, pattern)
		}
	}
}
