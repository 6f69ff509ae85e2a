//go:build linux

package hashmap_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sharedmap/sharedmap/hashmap"
)

// A program exports its maps' metrics in the Prometheus text format from
// a handler of its own, all maps in one call, each labelled map="name".
func ExampleWritePrometheus() {
	sessions, closeSessions := openExample("sessions.map", &hashmap.Options{Entries: 1000})
	defer closeSessions()
	users, closeUsers := openExample("users.map", &hashmap.Options{Entries: 1000})
	defer closeUsers()
	_ = sessions.Put([]byte("k"), []byte("v"))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if err := hashmap.WritePrometheus(w, map[string]*hashmap.Map{"sessions": sessions, "users": users}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})

	// The program serves mux; here the same call writes into a buffer.
	var b strings.Builder
	_ = hashmap.WritePrometheus(&b, map[string]*hashmap.Map{"sessions": sessions, "users": users})
	for line := range strings.Lines(b.String()) {
		if strings.Contains(line, "sharedmap_puts_total") {
			fmt.Print(line)
		}
	}
	// Output:
	// # HELP sharedmap_puts_total Entries stored, by every process. Map-wide, read from the file: every process with the map open reports the same value; aggregate over processes with max, not sum.
	// # TYPE sharedmap_puts_total counter
	// sharedmap_puts_total{map="sessions"} 1
	// sharedmap_puts_total{map="users"} 0
}
