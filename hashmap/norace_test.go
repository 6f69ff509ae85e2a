//go:build !race

package hashmap

const raceEnabled = false
