package offheap

// AddExclusive is for words that a lock in the file gives one writer at a
// time and that other processes only read, with sync/atomic: a sequence
// lock's counter, a counter kept under a lock. Such an add need not be an
// atomic read-modify-write, only seen in program order with the writer's
// other stores. On amd64 every plain store is (stores are not reordered
// with other stores, nor loads with other loads), so there it is a plain
// add: a Put that made its two sequence steps and its count with atomic
// adds took 1.028x the time (40 runs of each in the peer benchmark), since
// every lock-prefixed instruction is a full barrier. Elsewhere it is
// sync/atomic's add (order_other.go).
//
// The Go compiler keeps stores in program order, and drops a store that a
// later store to the same word overwrites only when nothing between them
// reads memory: a sequence's odd and even steps always have a call (a copy
// of variable length, a lock operation) between them.
