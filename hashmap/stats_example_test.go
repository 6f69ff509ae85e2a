package hashmap_test

import (
	"expvar"
	"log"
	"net/http"

	"github.com/sharedmap/sharedmap/hashmap"
)

// Stats marshals to JSON, so expvar can show it at /debug/vars; the
// package leaves the publishing to the program, since importing expvar
// registers that handler on http.DefaultServeMux.
func ExampleMap_Stats() {
	m, err := hashmap.Open("/dev/shm/cache.map", &hashmap.Options{Entries: 1_000_000})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	expvar.Publish("sharedmap", expvar.Func(func() any { return m.Stats() }))
	log.Fatal(http.ListenAndServe("localhost:8080", nil))
}
