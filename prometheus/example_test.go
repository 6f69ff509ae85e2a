package prometheus_test

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sharedmap/sharedmap/hashmap"
	smprom "github.com/sharedmap/sharedmap/prometheus"
)

// A program registers one Collector with every map it exports, and serves
// the registry.
func ExampleNewCollector() {
	dir, err := os.MkdirTemp("", "sharedmap-prometheus-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sessions, err := hashmap.Open(filepath.Join(dir, "sessions.map"), &hashmap.Options{Entries: 1000})
	if err != nil {
		log.Fatal(err)
	}
	defer sessions.Close()
	_ = sessions.Put([]byte("k"), []byte("v"))

	c, err := smprom.NewCollector(map[string]*hashmap.Map{"sessions": sessions})
	if err != nil {
		log.Fatal(err)
	}
	reg := prom.NewRegistry()
	if err := reg.Register(c); err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	// The program serves mux; here the registry is read directly.
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "sharedmap_puts_total" || f.GetName() == "sharedmap_stored_entries" {
			m := f.GetMetric()[0]
			fmt.Println(f.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue()+m.GetGauge().GetValue())
		}
	}
	// Output:
	// sharedmap_puts_total sessions 1
	// sharedmap_stored_entries sessions 1
}
