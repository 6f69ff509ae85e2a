module github.com/sharedmap/sharedmap

go 1.25.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/dgraph-io/ristretto/v2 v2.4.2
	github.com/edsrzf/mmap-go v1.2.0
	golang.org/x/sys v0.47.0
)

require github.com/dustin/go-humanize v1.0.1 // indirect
