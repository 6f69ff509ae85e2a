//go:build !race

package rediscache

const raceEnabled = false
