package hashmap

import "github.com/sharedmap/sharedmap/rwulock"

// Stats describe the map at one moment, read without locks.
type Stats struct {
	Entries          int     `json:"entries"`           // entries stored now
	Capacity         int     `json:"capacity"`          // entries the map was sized for
	MaxBloatFactor   float64 `json:"max_bloat_factor"`  // growth allowed past Capacity
	Segments         int     `json:"segments"`          // independently locked parts
	TiersInUse       int     `json:"tiers_in_use"`      // first tiers + linked overflow tiers
	TiersMax         int     `json:"tiers_max"`         // tiers the file can hold
	BytesUsed        int64   `json:"bytes_used"`        // entry chunks in use, in bytes
	BytesAllocatable int64   `json:"bytes_allocatable"` // entry space of the tiers in use
	FileSize         int64   `json:"file_size"`         // bytes reserved (sparse)
	ChunkSize        int     `json:"chunk_size"`        // allocation unit of entry space
	SlotsPerTier     int     `json:"slots_per_tier"`    // hash lookup slots per tier
	EntriesPerTier   int     `json:"entries_per_tier"`  // entries a tier takes before overflowing
	Compactions      int64   `json:"compactions"`       // tiers compacted by this process
	Relocations      int64   `json:"relocations"`       // values moved by this process
	Locks            int     `json:"locks"`             // application locks in the lock table
	LockAlgorithm    string  `json:"lock_algorithm"`    // the lock table's algorithm
	Cache            bool    `json:"cache"`             // created as a cache: entries expire and are evicted
	Evictions        int64   `json:"evictions"`         // entries evicted to make room, by every process since creation
	Expired          int64   `json:"expired"`           // expired entries reclaimed, by every process since creation
	ReadOnly         bool    `json:"read_only"`         // this process mapped the file read-only
	Path             string  `json:"path"`              // the map file
}

// Stats reads the map's counters and geometry.
func (m *Map) Stats() Stats {
	l := m.layout
	st := Stats{
		Entries: m.Len(), Capacity: l.Entries, MaxBloatFactor: l.MaxBloatFactor,
		Segments: int(l.Segments), TiersInUse: int(l.Segments + m.table.ExtraTiersInUse()),
		TiersMax: int(l.Tiers), FileSize: l.End, ChunkSize: int(l.ChunkSize),
		SlotsPerTier: int(l.Slots), EntriesPerTier: int(l.MaxTierEntries),
		Compactions: m.table.Compactions.Load(), Relocations: m.table.Relocations.Load(),
		Locks: m.lockLayout.locks, LockAlgorithm: m.lockLayout.algorithm,
		ReadOnly: m.readOnly, Path: m.file.Path(), Cache: l.Cache,
	}
	for i := range int(l.Segments) {
		s := m.table.Segment(i)
		st.Evictions += s.Evicted()
		st.Expired += s.Expired()
	}
	st.BytesUsed = m.table.UsedChunks() * l.ChunkSize
	st.BytesAllocatable = int64(st.TiersInUse) * l.Chunks * l.ChunkSize
	return st
}

// SegmentInfo describes one segment for inspection.
type SegmentInfo struct {
	Index   int           `json:"index"`
	Entries int           `json:"entries"`
	Tiers   int           `json:"tiers"`
	Seq     uint64        `json:"seq"`
	Lock    rwulock.State `json:"-"`
	LockStr string        `json:"lock"`
	Evicted int64         `json:"evictions"` // cache maps
	Expired int64         `json:"expired"`   // cache maps
}

// Segments describes every segment: entries, tiers, modification sequence
// and lock state (a snapshot; locks change as you read).
func (m *Map) Segments() []SegmentInfo {
	out := make([]SegmentInfo, m.layout.Segments)
	for i := range out {
		s := m.table.Segment(i)
		st := s.Lock().State()
		out[i] = SegmentInfo{Index: i, Entries: int(s.Len()), Tiers: int(s.Tiers()), Seq: s.Seq(), Lock: st, LockStr: st.String(),
			Evicted: s.Evicted(), Expired: s.Expired()}
	}
	return out
}
