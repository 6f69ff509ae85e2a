module github.com/sharedmap/sharedmap/rediscache

go 1.25.0

require (
	github.com/redis/rueidis v1.0.79
	github.com/sharedmap/sharedmap v0.0.0
	golang.org/x/sys v0.47.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgraph-io/ristretto/v2 v2.4.2 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/edsrzf/mmap-go v1.2.0 // indirect
)

replace github.com/sharedmap/sharedmap => ../
