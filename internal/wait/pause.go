package wait

import (
	"runtime"
	_ "unsafe" // for go:linkname
)

// procyield executes the CPU's spin-wait hint (PAUSE on amd64, YIELD on
// arm64) the given number of times. The runtime keeps this symbol reachable
// by linkname for existing users (go.dev/issue/67401), so it is stable.
//
//go:linkname procyield runtime.procyield
func procyield(cycles uint32)

// Spin executes n pause hints. It keeps a spinning waiter from starving its
// hyper-thread sibling and from flooding the memory bus.
func Spin(n uint32) { procyield(n) }

// Yield gives up the CPU: first to other goroutines of this process, then to
// other threads of any process.
func Yield() {
	runtime.Gosched()
	osYield()
}
