//go:build race

package hashmap

// raceEnabled: the race detector makes sync.Pool drop a quarter of what is
// put back, at random, so a pooled buffer is sometimes built anew.
const raceEnabled = true
