package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// keyset is the run's keys, their values and a Zipf sequence over them.
type keyset struct {
	keys      []string
	keyBytes  [][]byte
	valueSize int
	zipf      []uint32 // indices into keys, Zipf-distributed; a power of two long
}

const zipfLen = 1 << 20

func newKeyset(prefix string, n, valueSize int, s float64) *keyset {
	ks := &keyset{keys: make([]string, n), keyBytes: make([][]byte, n), valueSize: valueSize}
	for i := range n {
		ks.keys[i] = fmt.Sprintf("%s%08d", prefix, i)
		ks.keyBytes[i] = []byte(ks.keys[i])
	}
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, s, 1, uint64(n-1))
	ks.zipf = make([]uint32, zipfLen)
	// Zipf ranks are spread over the key space, so the hot keys are not
	// neighbours in any store's layout.
	perm := r.Perm(n)
	for i := range ks.zipf {
		ks.zipf[i] = uint32(perm[z.Uint64()])
	}
	return ks
}

// value is key i's value: its index, then a pattern, valueSize bytes.
func (ks *keyset) value(i int) []byte {
	v := make([]byte, ks.valueSize)
	for j := range v {
		v[j] = byte(i + j)
	}
	if len(v) >= 8 {
		binary.LittleEndian.PutUint64(v, uint64(i))
	}
	return v
}

// key is the key of the i-th request of the Zipf sequence.
func (ks *keyset) key(i int) int { return int(ks.zipf[i&(zipfLen-1)]) }

// contender is one way to read a cached key. newOp is called once per
// goroutine (so each may keep its own buffer); the op it returns reads
// the key of request i and fails on an error or a value of the wrong size.
type contender struct {
	name  string
	newOp func() func(i int) error
}

// measure runs op over successive requests in par goroutines, growing the
// count until one round lasts at least d (as testing.B does), and returns
// the last round's wall time over its requests: with par goroutines
// scaling perfectly, ns/op is 1/par of one goroutine's.
func measure(d time.Duration, par int, c contender) (float64, error) {
	n := 100
	for {
		el, err := round(n, par, c)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", c.name, err)
		}
		if el >= d || n >= 1e9 {
			return float64(el.Nanoseconds()) / float64(n), nil
		}
		next := 100 * n
		if el > 0 {
			next = int(1.2 * float64(n) * float64(d) / float64(el))
		}
		n = min(max(next, n+n/2), 100*n)
	}
}

// round does n requests in par goroutines, each taking chunks of the
// sequence in turn, and returns its wall time.
func round(n, par int, c contender) (time.Duration, error) {
	if par == 1 {
		op := c.newOp()
		start := time.Now()
		for i := range n {
			if err := op(i); err != nil {
				return 0, err
			}
		}
		return time.Since(start), nil
	}
	const grain = 256
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	ops := make([]func(int) error, par)
	for g := range ops {
		ops[g] = c.newOp()
	}
	start := time.Now()
	for g := range par {
		wg.Go(func() {
			op := ops[g]
			for {
				lo := int(next.Add(grain)) - grain
				if lo >= n {
					return
				}
				for i := lo; i < min(lo+grain, n); i++ {
					if err := op(i); err != nil {
						errOnce.Do(func() { first = err })
						next.Store(int64(n))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}

// figure is the medians and ranges of one contender's runs.
type figure struct {
	name     string
	one, par []float64 // ns/op of each run, 1 goroutine and GOMAXPROCS
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func cell(xs []float64) string {
	return fmt.Sprintf("%s (%s–%s)", ns(median(xs)), ns(slices.Min(xs)), ns(slices.Max(xs)))
}

func ns(x float64) string {
	switch {
	case x >= 10_000:
		return fmt.Sprintf("%.1f µs", x/1000)
	case x >= 100:
		return fmt.Sprintf("%.0f ns", x)
	default:
		return fmt.Sprintf("%.1f ns", x)
	}
}

// latencies runs every contender runs times, taking turns within a run so
// that a noisy stretch of the machine falls on all of them alike.
func latencies(cs []contender, runs int, d time.Duration, progress func(string)) ([]figure, error) {
	figs := make([]figure, len(cs))
	par := runtime.GOMAXPROCS(0)
	for r := range runs {
		for i, c := range cs {
			figs[i].name = c.name
			one, err := measure(d, 1, c)
			if err != nil {
				return nil, err
			}
			p, err := measure(d, par, c)
			if err != nil {
				return nil, err
			}
			figs[i].one = append(figs[i].one, one)
			figs[i].par = append(figs[i].par, p)
			progress(fmt.Sprintf("run %d/%d %-34s 1 goroutine %10s   %d goroutines %10s", r+1, runs, c.name, ns(one), par, ns(p)))
		}
	}
	return figs, nil
}
