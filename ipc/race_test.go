//go:build race

package ipc

// raceEnabled: the binary runs under the race detector, which slows every
// instrumented step many times over.
const raceEnabled = true
