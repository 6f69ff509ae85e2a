package offheap

// AddExclusive adds d to *p, a word that only the caller writes at this
// moment (it holds the lock that guards the word). Other processes, which
// load the word atomically, see the old value or the new, never a mix, and
// see the new value after every store this goroutine made before it and
// before every store it makes after (see order.go): a store-release, then
// a store barrier (DMB ISHST). sync/atomic's add is not enough here: on a
// CPU without LSE atomics (ARMv8.0: Cortex-A53 and A72, Graviton1) it is
// a load-acquire/store-release loop, after which a later plain store, an
// entry's byte under an odd sequence, may be seen before the odd value
// itself. That follows from the instructions sync/atomic emits there; the
// tests, run under emulation on an x86 host whose own ordering is
// stronger, cannot show it.
//
//go:noescape
func AddExclusive(p *uint64, d uint64)

// StoreExclusive stores v in *p, a word that only the caller writes at
// this moment, as AddExclusive adds (see order.go).
//
//go:noescape
func StoreExclusive(p *uint64, v uint64)
