module github.com/sharedmap/sharedmap/bench

go 1.26.0

require (
	github.com/PowerDNS/lmdb-go v1.9.3
	github.com/VictoriaMetrics/fastcache v1.13.0
	github.com/allegro/bigcache/v3 v3.1.0
	github.com/coocood/freecache v1.2.7
	github.com/dgraph-io/ristretto/v2 v2.4.2
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/sharedmap/sharedmap v0.0.0
	github.com/sharedmap/sharedmap/rediscache v0.0.0
	go.etcd.io/bbolt v1.5.0
	golang.org/x/image v0.47.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/edsrzf/mmap-go v1.2.0 // indirect
	github.com/golang/snappy v1.0.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)

replace github.com/sharedmap/sharedmap => ../

replace github.com/sharedmap/sharedmap/rediscache => ../rediscache
