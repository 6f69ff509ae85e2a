// Command floor measures what this machine's memory allows a lookup, so
// that a target in ns per operation can be judged against the machine
// rather than against the code:
//
//   - chase: one dependent load after another at random over a region of
//     huge pages, the latency a lookup that waits for each miss pays;
//   - copy: a value of 64 B or 1 KiB copied from a random place, each
//     copy independent of the last (the CPU overlaps them), and the same
//     after a random slot word that names the place (one hop first);
//   - serial: the same lookups when each must wait for the last one's
//     value, as one lookup of many instructions does (see window): a
//     random slot, then the value it names; and the slot and the value
//     requested together, as a hash table whose entry lies where the
//     key's hash says (sharedmap's first home run) can;
//   - window: one random load per iteration followed by a chain of
//     register-only steps: while an iteration is short the CPU overlaps
//     the next iterations' misses with this one's, and past a length its
//     reorder window cannot hold, each iteration pays a whole miss.
//
// Figures are medians of -runs runs. docs/PERFORMANCE.md quotes them for the AMD
// EPYC VM. Run it with: cd bench && go run ./floor
package main

import (
	"flag"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"github.com/sharedmap/sharedmap/offheap"
)

func main() {
	sizeMiB := flag.Int("size", 512, "MiB of memory to read from, mapped with transparent huge pages")
	runs := flag.Int("runs", 5, "runs per figure; the median is printed with the range")
	chaseOnly := flag.Bool("chase-only", false, "measure the dependent random load only (the scale run's floor)")
	flag.Parse()
	if *sizeMiB < 64 || *runs < 1 {
		fmt.Fprintln(os.Stderr, "floor: -size must be at least 64 (MiB, beyond the caches) and -runs at least 1")
		os.Exit(2)
	}
	size := *sizeMiB << 20
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	_ = syscall.Madvise(mem, syscall.MADV_HUGEPAGE) // advisory
	for i := range mem {
		mem[i] = byte(i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	fmt.Printf("%d MiB, %d runs a figure, median (min-max)\n\n", *sizeMiB, *runs)

	fmt.Println(report("chase: dependent random load", *runs, chase(mem, rng)))
	if *chaseOnly {
		return
	}
	for _, n := range []int{64, 1024} {
		fmt.Println(report(fmt.Sprintf("copy: independent random %d B", n), *runs, randomCopy(mem, rng, n, false)))
		fmt.Println(report(fmt.Sprintf("copy: random slot, then its %d B", n), *runs, randomCopy(mem, rng, n, true)))
	}
	fmt.Println("\nserial: each lookup waits for the last one's value")
	for _, n := range []int{64, 1024} {
		fmt.Println(report(fmt.Sprintf("  random slot, then its %d B", n), *runs, serialLookup(mem, rng, n, false)))
		fmt.Println(report(fmt.Sprintf("  slot and its %d B requested together", n), *runs, serialLookup(mem, rng, n, true)))
	}
	fmt.Println("\nwindow: one random load and N register-only steps (about 4 instructions each, 15 more for the loop) an iteration")
	for _, blocks := range []int{0, 1, 2, 3, 4, 5, 6, 8, 12, 16} {
		fmt.Println(report(fmt.Sprintf("  N = %3d", 10*blocks), *runs, window(mem, rng, blocks)))
	}
}

// report runs measure runs times and formats its ns per operation.
func report(what string, runs int, measure func() float64) string {
	ns := make([]float64, runs)
	for i := range ns {
		ns[i] = measure()
	}
	slices.Sort(ns)
	return fmt.Sprintf("%-40s %7.1f ns (%.1f-%.1f)", what, ns[len(ns)/2], ns[0], ns[len(ns)-1])
}

// chase links every 64-byte line of mem into one random cycle and returns
// a measurement of a walk along it.
func chase(mem []byte, rng *rand.Rand) func() float64 {
	lines := len(mem) / 64
	order := rng.Perm(lines)
	for i, l := range order {
		next := order[(i+1)%lines]
		*(*uint64)(unsafe.Pointer(&mem[l*64])) = uint64(next * 64)
	}
	const steps = 5 << 20
	return func() float64 {
		at := uint64(order[0] * 64)
		start := time.Now()
		for range steps {
			at = *(*uint64)(unsafe.Pointer(&mem[at]))
		}
		sink += at
		return float64(time.Since(start).Nanoseconds()) / steps
	}
}

// randomCopy returns a measurement of copies of n bytes from random
// 1 KiB-aligned places; viaSlot first reads a random word of a 32 MiB
// slot table on the heap that names the place, as a hash table's lookup
// reads its slot before its entry.
func randomCopy(mem []byte, rng *rand.Rand, n int, viaSlot bool) func() float64 {
	blocks := len(mem) / 1024
	script, slots := randomBlocks(rng, 1<<20, blocks), randomBlocks(rng, 8<<20, blocks)
	dst := make([]byte, 0, n)
	const ops = 2 << 20
	return func() float64 {
		start := time.Now()
		for j := range ops {
			b := script[j&(len(script)-1)]
			if viaSlot {
				b = slots[int(b)&(len(slots)-1)]
			}
			off := int(b) * 1024
			dst = append(dst[:0], mem[off:off+n]...)
			sink += uint64(dst[0])
		}
		return float64(time.Since(start).Nanoseconds()) / ops
	}
}

// randomBlocks returns n block numbers drawn at random below blocks.
func randomBlocks(rng *rand.Rand, n, blocks int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(rng.IntN(blocks))
	}
	return out
}

// serialLookup returns a measurement of lookups that each begin only
// when the last one's value has come: the next key's place depends on
// the value's last byte (times zero, which the compiler cannot see). A
// lookup reads a random slot of a 32 MiB table on the heap and copies the
// n bytes at the 2 KiB block it names; together, the value's lines are
// requested by prefetch with the slot's, its place being known from the
// key alone, and the slot is still read (and must name the same place).
func serialLookup(mem []byte, rng *rand.Rand, n int, together bool) func() float64 {
	blocks := len(mem) / 2048
	script, slots := randomBlocks(rng, 1<<20, blocks), randomBlocks(rng, 8<<20, blocks)
	if together {
		for _, b := range script {
			slots[int(b)&(len(slots)-1)] = b
		}
	}
	dst := make([]byte, 0, n)
	const ops = 1 << 20
	return func() float64 {
		next := 0
		start := time.Now()
		for j := range ops {
			b := script[(j+next)&(len(script)-1)]
			if together {
				offheap.PrefetchForRead(mem[int(b)*2048 : int(b)*2048+n])
			}
			off := int(slots[int(b)&(len(slots)-1)]) * 2048
			dst = append(dst[:0], mem[off:off+n]...)
			next = int(dst[n-1]) * zero
		}
		sink += uint64(next)
		return float64(time.Since(start).Nanoseconds()) / ops
	}
}

// zero is 0, in a variable so that the compiler keeps serialLookup's
// dependence on the value it multiplies.
var zero = 0

// window returns a measurement of iterations of one random load and
// blocks of ten register-only steps that do not depend on it.
func window(mem []byte, rng *rand.Rand, blocks int) func() float64 {
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
	script := randomBlocks(rng, 1<<20, len(words))
	return func() float64 { return windowRun(words, script, blocks) }
}

// windowRun is window's loop, in a function of its own so that nothing of
// a closure's stays live in it.
func windowRun(words []uint64, script []uint32, blocks int) float64 {
	const ops = 4 << 20
	var acc uint64
	start := time.Now()
	for j := range ops {
		v := words[script[j&(len(script)-1)]]
		x := uint64(j)
		for range blocks {
			x = fiveSteps(fiveSteps(x))
		}
		acc += v + x
	}
	sink += acc
	return float64(time.Since(start).Nanoseconds()) / ops
}

// fiveSteps is five dependent register-only steps (a copy, a rotate, an
// add and a xor each), small enough for Go to inline.
func fiveSteps(x uint64) uint64 {
	x = bits.RotateLeft64(x, 7) ^ (x + 1)
	x = bits.RotateLeft64(x, 11) ^ (x + 2)
	x = bits.RotateLeft64(x, 15) ^ (x + 3)
	x = bits.RotateLeft64(x, 19) ^ (x + 4)
	return bits.RotateLeft64(x, 23) ^ (x + 5)
}

// sink keeps the measured loads from being optimized away.
var sink uint64
