//go:build linux

package hashmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/offheap"
)

// TestDeadHolderRecoveredOnTimeout: two Maps on one file are two registry
// slots, as two processes would be. B takes a segment's write lock (its
// sequence odd, as mid-change) and "dies": its descriptor closes, which
// drops its registry lock exactly as process exit does. A's Put and Get on
// that segment time out once, recover, and succeed; a read lock A holds
// itself is not touched by the recovery.
func TestDeadHolderRecoveredOnTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	opts := &Options{Entries: 4096, AverageKeySize: 8, AverageValueSize: 8, Segments: 4, LockTimeout: 100 * time.Millisecond}
	a, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 200 {
		if err := a.Put(fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	b, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("k7")
	h := xxhash.Sum64(key)
	seg := b.table.For(h)
	if err := seg.Lock().WriteLock(time.Second); err != nil {
		t.Fatal(err)
	}
	// And a read lock of B's on another segment, plus one of A's own.
	other := a.table.Segment(int((h + 1) & 3))
	if err := b.table.Segment(int((h + 1) & 3)).Lock().ReadLock(0); err != nil {
		t.Fatal(err)
	}
	if err := other.Lock().ReadLock(0); err != nil {
		t.Fatal(err)
	}
	b.file.Close() // dies: no unlock, no Leave

	start := time.Now()
	if err := a.Put(key, []byte("after")); err != nil {
		t.Fatalf("Put on the dead writer's segment: %v", err)
	}
	if d := time.Since(start); d > opts.LockTimeout+time.Second {
		t.Fatalf("Put waited %v, lock timeout %v", d, opts.LockTimeout)
	}
	if v, err := a.Get(key); err != nil || string(v) != "after" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if a.recoveries.Load() == 0 {
		t.Fatal("no recovery ran")
	}
	// The rest of the dead process's share goes with an explicit pass; A's
	// own read lock stays.
	rep, err := a.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Segments) != 1 || rep.Segments[0].Orphans.Reads != 1 {
		t.Fatalf("explicit recovery: %+v", rep)
	}
	if st := other.Lock().State(); st.Readers != 1 {
		t.Fatalf("A's own read lock was taken away: %v", st)
	}
	_ = other.Lock().ReadUnlock()
	problems, err := a.Check()
	if err != nil || len(problems) != 0 {
		t.Fatalf("check after recovery: %v %v", problems, err)
	}
}

// TestOpenAloneClearsStaleLocks: every process died; the next one to open
// the file releases what they left before its first operation.
func TestOpenAloneClearsStaleLocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	opts := &Options{Entries: 4096, AverageKeySize: 8, AverageValueSize: 8, Segments: 4, LockTimeout: time.Second}
	b, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Put([]byte("x"), []byte("1"))
	for i := range 4 {
		_ = b.table.Segment(i).Lock().UpdateLock(0)
	}
	b.file.Close()
	a, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 4 {
		if st := a.table.Segment(i).Lock().State(); !st.Free() {
			t.Fatalf("segment %d still %v after an open with everyone dead", i, st)
		}
	}
	start := time.Now()
	if v, err := a.Get([]byte("x")); err != nil || string(v) != "1" || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("Get = %q, %v after %v", v, err, time.Since(start))
	}
	problems, err := a.Check()
	if err != nil || len(problems) != 0 {
		t.Fatalf("check: %v %v", problems, err)
	}
}

// killLockTimeout is the helpers' lock timeout in the kill test: a survivor
// blocked by a dead holder waits this long, recovers, and goes on.
const killLockTimeout = 200 * time.Millisecond

// earlierAttempt reports whether v is what a Put of key j by writer id
// with a sequence number after acked and before tried stored: an attempt
// killed before its acknowledgement, and applied.
func earlierAttempt(v []byte, id, j, acked, tried int) bool {
	var vid, vj, seq int
	if _, err := fmt.Sscanf(string(v), "%d:%d:%d:", &vid, &vj, &seq); err != nil {
		return false
	}
	return vid == id && vj == j && seq > acked && seq < tried && bytes.Equal(v, killValue(id, j, seq))
}

// killValue is the value of key j at sequence seq of writer id: a header
// and a filler whose length and byte follow from the header, so a reader
// can tell a torn value from a whole one.
func killValue(id, j, seq int) []byte {
	v := fmt.Appendf(nil, "%d:%d:%d:", id, j, seq)
	return append(v, bytes.Repeat([]byte{byte('a' + seq%26)}, seq%113)...)
}

func wholeKillValue(v []byte) bool {
	parts := bytes.SplitN(v, []byte(":"), 4)
	if len(parts) != 4 {
		return false
	}
	id, _ := strconv.Atoi(string(parts[0]))
	j, _ := strconv.Atoi(string(parts[1]))
	seq, err := strconv.Atoi(string(parts[2]))
	return err == nil && bytes.Equal(v, killValue(id, j, seq))
}

const killKeys = 64 // keys per writer

// killAcks maps the acknowledgement table of TestKillWriters: for writer w
// and key j, word (w*killKeys+j)*2 is the sequence last tried and the next
// word the sequence last acknowledged. Plain memory, not a pipe: a writer
// that made a system call per Put would nearly always die in one, never
// holding a lock.
func killAcks(t testing.TB, path string) []uint64 {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := int64(3 * killKeys * 2 * 8)
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	r, err := offheap.MapRegion(f, size, true)
	if err != nil {
		t.Fatal(err)
	}
	return r.Uint64s(0, 3*killKeys*2)
}

// killTimeoutTries is how many times in a row a kill writer's Put or
// Delete may time out before the writer reports an error. A try that
// times out on a lock the dead held recovers it (ErrTimeout says a live
// holder, or a dead one that pass could not yet release), so tries keep
// timing out only on live holders: on a loaded machine a live writer can
// be off its core longer than killLockTimeout while it holds a lock, and
// the map then says ErrTimeout, as documented. A recovery that failed
// would time out every try: the test keeps a writer dead past them all
// (killStayDead), so that its restart cannot recover in their stead.
const killTimeoutTries = 2

// killStayDead is how long every tenth killed writer stays dead: past
// every try a survivor makes, each of which waits a lock timeout, recovers
// and waits one more.
const killStayDead = 2*killTimeoutTries*killLockTimeout + 100*time.Millisecond

// stallMeter measures how long this process is kept from running beyond
// what it asked: a goroutine sleeps a millisecond at a time and adds what
// each sleep took beyond two (timer slack takes the first). On a loaded
// machine the other processes suffer delays of the same order, which a
// wait on their locks inherits.
type stallMeter struct{ overrun atomic.Int64 }

func newStallMeter() *stallMeter {
	s := &stallMeter{}
	go func() {
		const nap = time.Millisecond
		for {
			start := time.Now()
			time.Sleep(nap)
			if over := time.Since(start) - 2*nap; over > 0 {
				s.overrun.Add(int64(over))
			}
		}
	}()
	return s
}

// since is the overrun added since the reading before.
func (s *stallMeter) since(before int64) time.Duration {
	return time.Duration(s.overrun.Load() - before)
}

// killWriter is the helper of TestKillWriters: writer id rewrites its keys
// (values of changing sizes: in-place rewrites and moves) starting at
// sequence seq, recording each Put in the acknowledgement table before
// (tried) and after (acknowledged), and reads the other writers' keys,
// checking that no value is torn and that no operation waits longer than
// a lock timeout, a recovery and a retry, plus what the machine's load
// adds: each try that timed out on a live holder, and a multiple of how
// long this process was kept from running meanwhile.
func killWriter(m *Map, id, seq int) {
	acks := killAcks(&testing.T{}, os.Getenv("HASHMAP_FILE")+".acks")
	rng := rand.New(rand.NewPCG(uint64(id), uint64(seq)))
	limit := 2*killLockTimeout + time.Second
	stalls := newStallMeter()
	buf := make([]byte, 0, 256)
	var recoveries, repairs int64
	for ; ; seq++ {
		if n := m.recoveries.Load(); n != recoveries {
			recoveries = n
			testutil.Report("recovered")
		}
		if n := m.repairs.Load(); n != repairs {
			repairs = n
			testutil.Report("repaired")
		}
		j := rng.IntN(killKeys)
		key := fmt.Appendf(nil, "w%d-k%d", id, j)
		slot := (id*killKeys + j) * 2
		op := uint64(seq) << 1
		if rng.IntN(6) == 0 {
			op |= 1 // a Delete
		}
		atomic.StoreUint64(&acks[slot], op)
		start, stalledBefore := time.Now(), stalls.overrun.Load()
		var err error
		tries := 0
		for tries < killTimeoutTries {
			tries++
			if op&1 != 0 {
				_, err = m.Delete(key)
			} else {
				err = m.Put(key, killValue(id, j, seq))
			}
			if !errors.Is(err, ErrTimeout) {
				break
			}
			testutil.Report("timeout %v", err)
		}
		if err != nil {
			testutil.Report("error put or delete (try %d): %v", tries, err)
			return
		}
		atomic.StoreUint64(&acks[slot+1], op)
		other := fmt.Appendf(nil, "w%d-k%d", rng.IntN(3), rng.IntN(killKeys))
		v, err := m.GetInto(buf[:0], other)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			testutil.Report("error get: %v", err)
			return
		case !wholeKillValue(v):
			testutil.Report("error torn %q = %q", other, v)
			return
		}
		stalled := stalls.since(stalledBefore)
		if d, bound := time.Since(start), limit+time.Duration(tries-1)*killLockTimeout+4*stalled; d > bound {
			testutil.Report("error slow: an operation took %v (limit %v, %d tries, kept from running %v)", d, bound, tries, stalled)
			return
		}
	}
}

// killState is what the parent hears from the writers.
type killState struct {
	mu                  sync.Mutex
	errs                []string
	recoveries, repairs int
	timeouts            int            // tries that timed out on a live holder and were made again
	deaths              map[string]int // where writers killed themselves (TestKilledAtChosenSteps)
}

func (s *killState) read(id int, out *bufio.Scanner) {
	for out.Scan() {
		f := strings.Fields(out.Text())
		if len(f) < 2 || f[0] != "@" {
			continue
		}
		s.mu.Lock()
		switch {
		case f[1] == "recovered":
			s.recoveries++
		case f[1] == "repaired":
			s.repairs++
		case f[1] == "timeout":
			s.timeouts++
		case f[1] == "error":
			s.errs = append(s.errs, fmt.Sprintf("writer %d: %s", id, strings.Join(f[2:], " ")))
		case f[1] == "dying" && len(f) > 3:
			if s.deaths == nil {
				s.deaths = map[string]int{}
			}
			s.deaths[f[3]]++
		}
		s.mu.Unlock()
	}
}

// TestKillWriters: three writer processes share a map; one of them, picked
// at random, is SIGKILLed at a random instant and restarted, again and
// again (200 kills; SHAREDMAP_KILLS sets more). Survivors that find a lock
// held by the dead wait out their lock timeout, recover and go on: none may
// report an error, a torn value or a wait beyond the bound. At the end,
// every acknowledged Put is present with its value and every acknowledged
// Delete absent (a key the dead had an operation in flight on may show its
// outcome instead, or be gone if a rewrite was torn), and Check finds
// nothing wrong. The map is small and the values of many sizes, so values
// move and tiers compact all the time: a death in a compaction must lose
// no other key.
func TestKillWriters(t *testing.T) {
	kills := 200
	if n, err := strconv.Atoi(os.Getenv("SHAREDMAP_KILLS")); err == nil {
		kills = n
	}
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, killOpts)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	st := &killState{}
	acks := killAcks(t, path+".acks")
	var procs [3]*exec.Cmd
	var readers [len(procs)]sync.WaitGroup // each writer's reader, waited for before its Wait
	start := func(id int) *exec.Cmd { return startKillWriter(t, path, id, acks, st, &readers[id]) }
	for i := range procs {
		procs[i] = start(i)
	}
	// Every other kill is aimed at a compaction: it comes the moment the
	// file's count of compactions moves, while one is likely under way.
	watch, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	compactions := func() (n int64) {
		for i := range int(watch.layout.Segments) {
			n += watch.table.Segment(i).Counters().Compactions
		}
		return n
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	deadline := time.Now().Add(4 * time.Minute)
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(2+rng.IntN(25)) * time.Millisecond)
		if k%2 == 1 {
			for before, until := compactions(), time.Now().Add(50*time.Millisecond); compactions() == before && time.Now().Before(until); {
			}
		}
		i := rng.IntN(len(procs))
		_ = procs[i].Process.Signal(syscall.SIGKILL)
		readers[i].Wait() // every line it wrote before dying (Wait would close the pipe)
		_ = procs[i].Wait()
		if k%10 == 9 {
			// Stay dead past the survivors' tries, so survivors blocked
			// by what it held must recover it themselves, not the
			// restarted writer when it opens the map.
			time.Sleep(killStayDead)
		}
		procs[i] = start(i)
		st.mu.Lock()
		errs := st.errs
		st.mu.Unlock()
		if len(errs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d kills in the time allowed", k)
		}
	}
	time.Sleep(50 * time.Millisecond)
	for i, p := range procs {
		_ = p.Process.Signal(syscall.SIGKILL)
		readers[i].Wait()
		_ = p.Wait()
	}
	m = reopenAfterKills(t, path, st)
	if m == nil {
		return
	}
	defer m.Close()
	newerInFlight, absentInFlight := checkKillAcks(t, m, acks, 3)
	ms := m.Stats()
	t.Logf("%d kills, %d recovery passes that repaired something (%d after a lock timeout in a survivor), %d tries timed out on a live holder; in-flight operations found applied %d, keys absent after an unacknowledged Put %d; %d compactions and %d relocations in the file",
		kills, st.repairs, st.recoveries, st.timeouts, newerInFlight, absentInFlight, ms.Compactions, ms.Relocations)
	if ms.Compactions == 0 {
		t.Error("no tier was compacted: the test lost its point")
	}
}

// reopenAfterKills reports what the writers of a kill test said went
// wrong, and returns nil if anything did; otherwise it opens the map (the
// opener recovers what the last deaths left) and checks it clean.
func reopenAfterKills(t *testing.T, path string, st *killState) *Map {
	t.Helper()
	for _, e := range st.errs {
		t.Error(e)
	}
	if t.Failed() {
		return nil
	}
	m, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		m.Close()
		t.Fatalf("check after the last kills (the opener recovered what they left): %v %v", problems, err)
	}
	return m
}

// startKillWriter starts writer id of a kill test (killWriter, in a helper
// process with env added), at the sequence after the last it tried, with
// st reading what it says until it exits (readers counts the readers).
func startKillWriter(t *testing.T, path string, id int, acks []uint64, st *killState, readers *sync.WaitGroup, env ...string) *exec.Cmd {
	t.Helper()
	seq := 1
	for j := range killKeys {
		seq = max(seq, killOp(atomic.LoadUint64(&acks[(id*killKeys+j)*2])).seq()+1)
	}
	cmd := helperCmd("kill-writer", path, strconv.Itoa(id), strconv.Itoa(seq))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readers.Add(1)
	go func() {
		defer readers.Done()
		st.read(id, bufio.NewScanner(out))
	}()
	return cmd
}

// checkKillAcks checks the keys of the first writers writers of a kill
// test against the acknowledgement table: every acknowledged Put present
// with its value, every acknowledged Delete absent, and a key with an
// operation in flight holding that operation's outcome or the previous
// one (the last acknowledged, or that of an earlier attempt, killed too,
// that had been applied); in a file without undo records, a torn rewrite
// may also have lost the key. It returns how many in-flight operations
// were found applied, and how many keys were absent after an
// unacknowledged Put.
func checkKillAcks(t *testing.T, m *Map, acks []uint64, writers int) (newerInFlight, absentInFlight int) {
	t.Helper()
	undo := m.Stats().UndoRecords
	for id := range writers {
		for j := range killKeys {
			tried, ack := killOp(acks[(id*killKeys+j)*2]), killOp(acks[(id*killKeys+j)*2+1])
			inFlight := tried != ack
			v, err := m.Get(fmt.Appendf(nil, "w%d-k%d", id, j))
			if errors.Is(err, ErrNotFound) {
				switch {
				case ack.put() && !inFlight:
					t.Errorf("writer %d key %d: acknowledged seq %d lost", id, j, ack.seq())
				case ack.put() && tried.put() && undo:
					t.Errorf("writer %d key %d: acknowledged seq %d lost to a Put (seq %d) cut short", id, j, ack.seq(), tried.seq())
				case ack.put() || (inFlight && tried.put()):
					absentInFlight++
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case ack.put() && bytes.Equal(v, killValue(id, j, ack.seq())):
			case inFlight && tried.put() && bytes.Equal(v, killValue(id, j, tried.seq())):
				newerInFlight++
			case inFlight && earlierAttempt(v, id, j, ack.seq(), tried.seq()):
			default:
				t.Errorf("writer %d key %d: value %q; acknowledged %v, tried %v (a deleted key back, or a value no Put wrote)", id, j, v, ack, tried)
			}
		}
	}
	return newerInFlight, absentInFlight
}

// TestKilledAtChosenSteps: a writer process on a small map that
// compacts all the time kills itself (SIGKILL) at a chosen step of an
// insert, a relocation, a compaction or the rebuild that recovers its
// predecessor (see internal/testhook), or, one round in three, of an
// in-place rewrite, 30 times at random steps (more if no compaction has
// been seen yet: about one seed in 60 gave none). Every other time the
// parent recovers and checks at once; otherwise the next writer recovers
// (and may die inside that). Every acknowledged operation must hold. The
// kills land exactly inside the code they test, which random kills almost
// never do. Mutations caught (checked): the slot named before a moved
// entry's copy (a lost key), recovery trusting used chunks no slot names
// (a deleted key back), no undo record put back (a key lost to a Put cut
// short). A move without its journal is caught by the in-process segment
// tests, which stop at every step.
func TestKilledAtChosenSteps(t *testing.T) {
	t.Run("fast-ledgers", func(t *testing.T) { killedAtChosenSteps(t, true) })
	// A file from before fast ledgers: Put's fast path keeps its lock in the ledger.
	t.Run("no-fast-ledgers", func(t *testing.T) { killedAtChosenSteps(t, false) })
}

func killedAtChosenSteps(t *testing.T, fastLedgers bool) {
	path := filepath.Join(t.TempDir(), "m")
	// One writer's 64 keys on a map sized for them: it compacts all the time.
	testCreateWithoutFastLedgers = !fastLedgers
	m, err := Open(path, &Options{Entries: killKeys, AverageKeySize: 8, AverageValueSize: 40, Segments: 1, MaxBloatFactor: 1})
	testCreateWithoutFastLedgers = false
	if err != nil {
		t.Fatal(err)
	}
	if m.Stats().FastLedgers != fastLedgers {
		t.Fatalf("the map has fast ledgers: %v, want %v", m.Stats().FastLedgers, fastLedgers)
	}
	m.Close()
	acks := killAcks(t, path+".acks")
	st := &killState{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	died := 0
	compacted := false // seen at a check: by chance a run of 30 deaths can come before any compaction
	for round := 0; round < 30 || !compacted && round < 90; round++ {
		at := 1 + rng.IntN(300)
		var read sync.WaitGroup
		in := "other"
		if round%3 == 2 {
			in = "rewrite"
		}
		cmd := startKillWriter(t, path, 0, acks, st, &read, "HASHMAP_DIE_AT_STEP="+strconv.Itoa(at), "HASHMAP_DIE_IN="+in)
		timer := time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
		read.Wait() // all it said, up to its death (Wait would close the pipe)
		err := cmd.Wait()
		timer.Stop()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: the writer ended with %v, not by its own SIGKILL at step %d (SIGTERM: it never got there in 20 s)", round, err, at)
		}
		if len(st.errs) > 0 {
			break
		}
		died++
		if round%2 == 0 {
			// Recover here and check at once, before later writes can
			// rewrite a key a bad recovery lost. (Odd rounds leave the
			// recovery to the next writer, which may die inside it.)
			m, err := Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkKillAcks(t, m, acks, 1)
			compacted = compacted || m.Stats().Compactions > 0
			m.Close()
			if t.Failed() {
				t.Fatalf("round %d: died at step %d", round, at)
			}
		}
	}
	m = reopenAfterKills(t, path, st)
	if m == nil {
		return
	}
	defer m.Close()
	newer, absent := checkKillAcks(t, m, acks, 1)
	ms := m.Stats()
	t.Logf("%d deaths at chosen steps (%v), %d recovery passes that repaired something; in flight: %d applied, %d keys absent; %d compactions in the file",
		died, st.deaths, st.repairs, newer, absent, ms.Compactions)
	if !compacted && ms.Compactions == 0 || st.repairs == 0 {
		t.Fatal("no compaction or no repair: the test lost its point")
	}
}

// killOpts is TestKillWriters' map: small, so that 192 keys with values of
// 8 to 120 bytes keep relocating and compacting its tiers.
var killOpts = &Options{Entries: 192, AverageKeySize: 8, AverageValueSize: 40, Segments: 2, MaxBloatFactor: 1}

// killOp is an entry of the acknowledgement table: the sequence of a
// writer's operation on a key, shifted left once, with bit 0 set for a
// Delete. 0: none yet.
type killOp uint64

func (o killOp) seq() int  { return int(o >> 1) }
func (o killOp) put() bool { return o != 0 && o&1 == 0 }
func (o killOp) String() string {
	switch {
	case o == 0:
		return "nothing"
	case o&1 != 0:
		return fmt.Sprintf("delete %d", o.seq())
	}
	return fmt.Sprintf("put %d", o.seq())
}

// TestDeadLockTableHolder: a process SIGKILLed while it holds an application
// lock of the lock table; a survivor's Lock gets the lock after the map's
// lock timeout and a recovery pass, for each algorithm recovery covers.
func TestDeadLockTableHolder(t *testing.T) {
	for _, algo := range []string{"hapax-cr", "hapax", "cohort", "tidex", "ticket-awn", "alock", "ttas"} {
		t.Run(algo, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			opts := *helperOpts
			opts.Locks, opts.LockAlgorithm, opts.LockTimeout = 1, algo, 100*time.Millisecond
			m, err := Open(path, &opts)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			cmd := helperCmd("hold-lock", path)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			if !testutil.WaitFor(10*time.Second, func() bool { _, err := m.Get([]byte("held")); return err == nil }) {
				t.Fatal("the helper never took the lock")
			}
			if err := m.Locks().LockTimeout(0, 50*time.Millisecond); !errors.Is(err, ErrTimeout) {
				t.Fatalf("the live holder's lock was granted: %v", err)
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			start := time.Now()
			if err := m.Locks().Lock(0); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("Lock took %v after the holder died", d)
			}
			if err := m.Locks().Unlock(0); err != nil {
				t.Fatal(err)
			}
			if m.recoveries.Load() == 0 {
				t.Fatal("no recovery ran")
			}
		})
	}
}

// TestReadersWaitForDeadWritersRepair: a writer dies (its handle's file
// closed, so its registry slot reads dead) halfway through a value it
// rewrites in place, holding the write lock; a reader keeps trying the
// segment's read lock while another handle recovers. The reader never gets
// in while the sequence is odd (the data half changed), and afterwards the
// key has, whole, the value the writer was writing (Put's fast path stages
// its bytes in the undo record: see segment.record). (Recovery took the dead writer's place with the
// update lock, which let such a reader in at once, and, if the reader was
// still inside when the upgrade's time ran out, gave the lock up with the
// sequence odd and the torn value in place: a Get then returned it.)
func TestReadersWaitForDeadWritersRepair(t *testing.T) {
	var stuck atomic.Pointer[chan struct{}]
	var steps atomic.Int32
	testhook.OnStep = func() {
		// Only the rewrite's own steps: the fast path's taking of the lock
		// and the undo record's have steps too (counting them all, the
		// 4th was the undo record's, before any byte of the value).
		pc, _, _, _ := runtime.Caller(3) // OnStep, Step, testStep, then the step's function
		if !strings.HasSuffix(runtime.FuncForPC(pc).Name(), ".rewriteInPlace") {
			return
		}
		if c := stuck.Load(); c != nil && steps.Add(1) == 2 { // the header, then the first half of the value written
			stuck.Store(nil)
			close(*c)
			select {} // dead: this goroutine never runs again
		}
	}
	defer func() { testhook.OnStep = nil }()
	old := bytes.Repeat([]byte("A"), 64)
	for round := range 10 {
		path := filepath.Join(t.TempDir(), "m")
		opts := &Options{Entries: 1024, AverageKeySize: 8, AverageValueSize: 64, Segments: 1, LockTimeout: 200 * time.Millisecond}
		a := mustOpen(t, path, opts)
		key := []byte("key00001")
		if err := a.Put(key, old); err != nil {
			t.Fatal(err)
		}
		b := mustOpen(t, path, opts)
		c := make(chan struct{})
		steps.Store(0)
		stuck.Store(&c)
		go func() { _ = b.Put(key, bytes.Repeat([]byte("B"), 64)) }()
		<-c
		torn := append(append(append([]byte{}, key...), bytes.Repeat([]byte("B"), 32)...), old[32:]...)
		if !bytes.Contains(a.file.Region.Bytes(0, a.file.Region.Len()), torn) {
			t.Fatalf("round %d: the writer did not stop halfway through the value", round)
		}
		b.file.Close() // its OFD lock goes: the registry reads its process as dead
		seg := a.table.Segment(0)
		lk := seg.Lock()
		stop, entered, readerDone := make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
		go func() {
			defer close(readerDone)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if lk.TryReadLock() {
					if seg.Seq()&1 == 1 {
						entered <- struct{}{}
						time.Sleep(400 * time.Millisecond) // a slow reader, past the recovery's wait
					}
					_ = lk.ReadUnlock()
				}
			}
		}()
		_, rerr := a.Recover()
		close(stop)
		<-readerDone
		select {
		case <-entered:
			t.Fatalf("round %d: a reader took the read lock while the dead writer's rewrite was half done (recover: %v)", round, rerr)
		default:
		}
		if rerr != nil {
			t.Fatalf("round %d: recover: %v", round, rerr)
		}
		if v, err := a.Get(key); err != nil || !bytes.Equal(v, bytes.Repeat([]byte("B"), 64)) {
			t.Fatalf("round %d: after recovery Get gave %q, %v; want the value the dead writer was writing", round, v, err)
		}
		if seg.Seq()&1 != 0 || !lk.State().Free() {
			t.Fatalf("round %d: after recovery sequence %d, lock %v", round, seg.Seq(), lk.State())
		}
		_ = a.Close()
	}
}

// TestOpenWhileRecoveryWaits: a live process C is stopped in the middle of a
// change of segment 0's lock (its ledger unsettled, as when SIGSTOPped
// between a CAS's two ledger steps) and D died with the map open, so A's
// recovery pass holds the recovery lock for its whole LockTimeout, waiting
// on C. An Open by B with a shorter LockTimeout meanwhile succeeds: it
// waits for the pass to end, and leaves what D held to a later pass. (It
// failed, with an error that matched no sentinel.)
func TestOpenWhileRecoveryWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	a := mustOpen(t, path, &Options{Entries: 1024, AverageKeySize: 8, AverageValueSize: 8, Segments: 2, LockTimeout: time.Second})
	defer a.Close()
	c := mustOpen(t, path, nil)
	defer c.Close()
	d := mustOpen(t, path, nil)
	if err := d.Put([]byte("x"), []byte("y")); err != nil {
		t.Fatal(err)
	}
	d.file.Close() // D dies
	ledger := c.reg.Ledger(c.reg.Self(), 0)
	atomic.AddUint64(ledger, 1<<34) // C stopped mid-CAS
	defer atomic.AddUint64(ledger, ^uint64(1<<34-1))
	done := make(chan error, 1)
	go func() { _, err := a.Recover(); done <- err }()
	time.Sleep(100 * time.Millisecond)
	b, err := Open(path, &Options{LockTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open while a recovery pass waits on a live process: %v", err)
	}
	_ = b.Close()
	<-done
}

// TestFailedOpenLeavesNoSlot: an Open whose recovery of a dead process
// fails after it took its registry slot (here because a live ledger claims
// a read the lock word lacks) gives the slot back: it stayed in use with
// its lock gone, and every later Check reported a process that died with
// the map open.
func TestFailedOpenLeavesNoSlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	opts := &Options{Entries: 1024, AverageKeySize: 8, AverageValueSize: 8, Segments: 2, LockTimeout: 200 * time.Millisecond}
	a := mustOpen(t, path, opts)
	defer a.Close()
	d := mustOpen(t, path, opts)
	d.file.Close() // D dies
	ledger := a.reg.Ledger(a.reg.Self(), 0)
	atomic.AddUint64(ledger, 1) // A's ledger claims a read the word lacks
	_, err := Open(path, opts)
	atomic.AddUint64(ledger, ^uint64(0))
	if err == nil {
		t.Fatal("the Open succeeded; the test needs it to fail after taking its slot")
	}
	slots, err := a.reg.Slots()
	if err != nil {
		t.Fatal(err)
	}
	dead := 0
	for _, s := range slots {
		if s.Dead() {
			dead++
		}
	}
	if dead != 1 {
		t.Fatalf("%d dead slots after the failed Open; want 1 (D's)", dead)
	}
}

// mustOpen opens the map at path or fails the test.
func mustOpen(t *testing.T, path string, o *Options) *Map {
	t.Helper()
	m, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
