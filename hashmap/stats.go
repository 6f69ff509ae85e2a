package hashmap

import "time"

// Stats describe the map at one moment, read without locks.
type Stats struct {
	Entries          int     `json:"entries"`           // entries stored now
	Capacity         int     `json:"capacity"`          // entries the map was sized for
	MaxBloatFactor   float64 `json:"max_bloat_factor"`  // growth allowed past Capacity
	Segments         int     `json:"segments"`          // independently locked parts, in use now (a map that splits has more as it grows)
	MaxSegments      int     `json:"max_segments"`      // the most segments the map may split into (Segments in maps that do not split)
	TiersInUse       int     `json:"tiers_in_use"`      // first tiers + linked overflow tiers
	TiersMax         int     `json:"tiers_max"`         // tiers the file holds now (first tiers and the overflow pool)
	TiersLimit       int     `json:"tiers_limit"`       // tiers the file may grow to hold (TiersMax in a map that does not grow)
	MaxFileSize      int64   `json:"max_file_size"`     // the size the file may grow to (FileSize in a map that does not grow)
	GrowthSteps      int     `json:"growth_steps"`      // times the file has grown
	BytesUsed        int64   `json:"bytes_used"`        // entry chunks in use, in bytes
	BytesAllocatable int64   `json:"bytes_allocatable"` // entry space of the tiers in use
	FileSize         int64   `json:"file_size"`         // the file's size (overflow tiers take disk only once used)
	ChunkSize        int     `json:"chunk_size"`        // allocation unit of entry space
	SlotsPerTier     int     `json:"slots_per_tier"`    // hash lookup slots per tier
	EntriesPerTier   int     `json:"entries_per_tier"`  // entries a tier takes before overflowing
	Compactions      int64   `json:"compactions"`       // tiers compacted: by every process since creation when MovesCounted, else by this process
	Relocations      int64   `json:"relocations"`       // values moved because they outgrew their chunks: likewise
	MovesCounted     bool    `json:"moves_counted"`     // the file counts compactions and relocations (files from before this do not)
	Locks            int     `json:"locks"`             // application locks in the lock table
	LockAlgorithm    string  `json:"lock_algorithm"`    // the lock table's algorithm
	Cache            bool    `json:"cache"`             // created as a cache: entries expire and are evicted
	Counters         bool    `json:"counters"`          // the file keeps the counters below (files from before them do not)
	UndoRecords      bool    `json:"undo_records"`      // values rewritten in place go through an undo record first, so a process killed in the middle loses no key (see Options.NoUndo)
	FastLedgers      bool    `json:"fast_ledgers"`      // the file has fast ledgers for Put's fast path (files created before them do not; their Puts are a little slower)
	Hits             int64   `json:"hits"`              // Gets, GetMany keys and Contains that found the key, by every process that opened the map for writing
	Misses           int64   `json:"misses"`            // Gets, GetMany keys and Contains that did not
	Puts             int64   `json:"puts"`              // entries stored by Put, PutMany, PutWithTTL, PutIfAbsent, Compute and Update
	Deletes          int64   `json:"deletes"`           // entries removed by Delete, DeleteMany, Compute and Update
	Evictions        int64   `json:"evictions"`         // entries evicted to make room (cache maps)
	Expired          int64   `json:"expired"`           // expired entries reclaimed (cache maps)
	LockWaits        int64   `json:"lock_waits"`        // operations that found their segment's lock taken and waited
	LockTimeouts     int64   `json:"lock_timeouts"`     // segment lock waits that ran out LockTimeout, each once, whether the recovery pass after it let the operation in or it ended in ErrTimeout
	ReadOnly         bool    `json:"read_only"`         // this process mapped the file read-only
	Resident         int64   `json:"resident"`          // bytes of the file this process has mapped in
	HugePageBytes    int64   `json:"huge_page_bytes"`   // of them, mapped with 2 MiB pages (see Options.NoHugePages)
	Path             string  `json:"path"`              // the map file
}

// Stats reads the map's counters and geometry, and how much of the file
// this process has in memory (from /proc/self/smaps, which makes it a call
// for monitoring, not per operation). A closed map has zero Stats. Stats
// marshals to JSON, for expvar.Func say (the package imports no expvar);
// for Prometheus, see WritePrometheus and Metrics.
func (m *Map) Stats() Stats {
	c, err := m.enterAny(false)
	if err != nil {
		return Stats{}
	}
	defer c.Leave()
	return m.stats()
}

// stats is Stats for a caller already counted in.
func (m *Map) stats() Stats {
	l := m.layout
	m.table.Refresh() // another process may have grown the file
	st := Stats{
		Entries: int(m.table.Len()), Capacity: l.Entries, MaxBloatFactor: l.MaxBloatFactor,
		Segments: int(m.table.Segments()), MaxSegments: int(l.MaxSegments), TiersInUse: int(m.table.Segments() + m.table.ExtraTiersInUse()),
		TiersMax: int(m.table.Present()), TiersLimit: int(l.MaxTiers), FileSize: m.file.Length(), MaxFileSize: l.MaxEnd(),
		ChunkSize:    int(l.ChunkSize),
		SlotsPerTier: int(l.Slots), EntriesPerTier: int(l.MaxTierEntries),
		Locks: m.lockLayout.locks, LockAlgorithm: m.lockLayout.algorithm,
		ReadOnly: m.readOnly, Path: m.file.Path(), Cache: l.Cache,
	}
	st.Counters = l.Stats
	st.UndoRecords = l.Undo
	st.FastLedgers = l.FastLedgers
	st.MovesCounted = l.MoveCounters
	if steps, err := m.table.GrowthSteps(); err == nil {
		st.GrowthSteps = len(steps)
	}
	for _, s := range m.segments() {
		st.Hits += s.Hits
		st.Misses += s.Misses
		st.Puts += s.Puts
		st.Deletes += s.Deletes
		st.Evictions += s.Evicted
		st.Expired += s.Expired
		st.LockWaits += s.LockWaits
		st.LockTimeouts += s.LockTimeouts
		st.Compactions += s.Compactions
		st.Relocations += s.Relocations
	}
	if !st.MovesCounted { // an older file: only this process's moves are known
		st.Compactions, st.Relocations = m.table.Compactions.Load(), m.table.Relocations.Load()
	}
	st.BytesUsed = m.table.UsedChunks() * l.ChunkSize
	st.BytesAllocatable = int64(st.TiersInUse) * l.Chunks * l.ChunkSize
	if res, err := m.file.Residency(); err == nil { // zeros where /proc is not mounted
		st.Resident, st.HugePageBytes = res.Resident, res.Huge
	}
	return st
}

// SegmentInfo describes one segment for inspection.
type SegmentInfo struct {
	Index   int `json:"index"`   // the segment's number, 0 to Stats.Segments-1
	Entries int `json:"entries"` // entries stored in it, in all its tiers
	Tiers   int `json:"tiers"`   // its first tier and the overflow tiers linked to it
	// Seq is the segment's modification sequence: odd while a writer is
	// inside (or died inside, until recovery), moved by every change
	// that rewrites, moves or removes an entry.
	Seq     uint64    `json:"seq"`
	Lock    LockState `json:"-"`    // the segment's lock when read
	LockStr string    `json:"lock"` // Lock as text: "free", or the locks held and the waiters
	// Counters since creation, as in Stats.
	// Hits and Misses of a map that splits are counted by the segments it
	// was created with: those of a segment split into are in the ones of
	// the segment it descends from (Index mod the segments at creation).
	Hits         int64 `json:"hits"`          // as Stats.Hits, for this segment
	Misses       int64 `json:"misses"`        // as Stats.Misses
	Puts         int64 `json:"puts"`          // as Stats.Puts
	Deletes      int64 `json:"deletes"`       // as Stats.Deletes
	Evicted      int64 `json:"evictions"`     // as Stats.Evictions
	Expired      int64 `json:"expired"`       // as Stats.Expired
	LockWaits    int64 `json:"lock_waits"`    // as Stats.LockWaits
	LockTimeouts int64 `json:"lock_timeouts"` // as Stats.LockTimeouts
	Compactions  int64 `json:"compactions"`   // files that count them (Stats.MovesCounted)
	Relocations  int64 `json:"relocations"`   // likewise
}

// LockState is what a segment's lock word held when it was read: the
// locks taken and the writers waiting.
type LockState struct {
	Readers uint32 // read locks held
	Update  bool   // the update lock is held
	Write   bool   // the write lock is held
	Waiters uint32 // writers and upgraders waiting
}

// Segments describes every segment: entries, tiers, modification sequence,
// lock state and counters (a snapshot, read without locks: locks and
// counters change as you read); nil once the map is closed.
func (m *Map) Segments() []SegmentInfo {
	c, err := m.enterAny(false)
	if err != nil {
		return nil
	}
	defer c.Leave()
	return m.segments()
}

// segments is Segments for a caller already counted in.
func (m *Map) segments() []SegmentInfo {
	out := make([]SegmentInfo, m.table.Segments())
	slots := m.slotCounters()
	for i := range out {
		s := m.table.Segment(i)
		st := s.Lock().State()
		c := s.Counters()
		hits, misses := m.lookups(i, slots)
		out[i] = SegmentInfo{Index: i, Entries: int(s.Len()), Tiers: int(s.Tiers()), Seq: s.Seq(),
			Lock: LockState{Readers: st.Readers, Update: st.Update, Write: st.Write, Waiters: st.Waiters}, LockStr: st.String(),
			Hits: hits, Misses: misses, Puts: c.Puts, Deletes: c.Deletes,
			Evicted: c.Evicted, Expired: c.Expired, LockWaits: c.LockWaits, LockTimeouts: c.LockTimeouts,
			Compactions: c.Compactions, Relocations: c.Relocations}
	}
	return out
}

// GrowthStep is one lengthening of a map's file (see Options.MaxSize).
type GrowthStep struct {
	Tiers    int       `json:"tiers"`     // tiers the file held after it
	FileSize int64     `json:"file_size"` // the file's size after it
	At       time.Time `json:"at"`        // when
}

// Growth lists the times the map's file grew, oldest first: nil for a map
// that has not grown, or does not grow. A process killed between growing
// the file and recording it leaves that step out (the file's size still
// says how large it is).
func (m *Map) Growth() ([]GrowthStep, error) {
	c, err := m.enterAny(false)
	if err != nil {
		return nil, err
	}
	defer c.Leave()
	steps, err := m.table.GrowthSteps()
	if err != nil {
		return nil, err
	}
	var out []GrowthStep
	for _, s := range steps {
		out = append(out, GrowthStep{Tiers: int(s.Tiers), FileSize: m.layout.TiersOff + s.Tiers*m.layout.TierSize, At: s.At})
	}
	return out, nil
}
