package offheap

// AddExclusive is for words that a lock in the file gives one writer at a
// time and that other processes only read, with sync/atomic: a sequence
// lock's counter, a counter kept under a lock. Such an add need not be an
// atomic read-modify-write, only seen in program order with the writer's
// other stores. On amd64 every plain store is (stores are not reordered
// with other stores, nor loads with other loads), so there it is a plain
// add: an atomic add is a lock-prefixed instruction, a full barrier, and
// a Put makes three of them (its two sequence steps and its count), each
// waiting for every store before it to drain, where program order is all
// that is needed. Elsewhere it is sync/atomic's add (order_other.go).
//
// The hardware keeps the order; the compiler must too. A plain store is
// outside Go's memory model when another goroutine or process reads the
// word at the same time, so nothing promises that the compiler will not
// merge a sequence's odd and even steps, or move the entry's stores across
// them. The amd64 version is therefore never inlined: to the compiler a
// call may read and write any memory, so it keeps every store on its side
// of the call, whatever later compilers learn about the stores between.
//
// The exclusivity is the lock's. If it were ever broken (a recoverer
// releasing the lock of a process wrongly judged dead), two writers would
// corrupt the entries they share whatever the adds were, and a lost add
// could leave the sequence odd (readers then take the read lock until a
// Repair) or even during a write.
