package offheap

import "math"

// maxMapSize is the largest mapping this package makes: mmap-go takes an int
// length, and a 64-bit address space leaves room for any realistic map.
const maxMapSize = math.MaxInt64 / 2
