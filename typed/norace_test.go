//go:build !race

package typed

const raceEnabled = false
