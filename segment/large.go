package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// Large values (files with Layout.LargeValues). A value too large for one
// entry is cut into parts of PartSize bytes, each an ordinary entry of the
// kind kindPart under a 20-byte part key (the value's id, the part's
// number, the owner key's hash), spread over all segments by the part
// key's own hash. The user key's entry, of the kind kindDescriptor, holds
// the Descriptor instead of the value. The hashmap package runs the
// protocol: it inserts every part of a new id, then swaps the descriptor
// in under the key's segment lock (SwapLarge), then deletes the parts of
// the value it replaced. Parts of an id are never rewritten, so a reader
// that finds every part of the descriptor it read, with the value's XXH64
// right, holds that value whole. This file holds the segment's side: the
// encodings and the operations on one segment.
//
// A writer never holds two segments' locks: every operation here takes
// the lock of one segment alone. A reader that holds a key segment's read
// lock (to keep swaps off while it reads parts) takes only other
// segments' read locks, so no cycle of waits can form.

// DescriptorSize is the length of an encoded Descriptor.
const DescriptorSize = 40

// PartKeySize is the length of a part key.
const PartKeySize = 20

// descriptorMagic starts every descriptor: it names the encoding's version.
const descriptorMagic = 0x3156_4c53 // "SLV1" read little-endian

// Descriptor says where a large value is: the parts of id ID, each
// PartSize bytes but the last, Length bytes in all, whose XXH64 is Sum.
type Descriptor struct {
	PartSize uint32
	Length   uint64
	Parts    uint32
	ID       uint64
	Sum      uint64
}

// Encode appends the descriptor's stored form to b: magic (4), part size
// (4), length (8), part count (4), reserved zero (4), id (8), XXH64 (8).
func (d *Descriptor) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, descriptorMagic)
	b = binary.LittleEndian.AppendUint32(b, d.PartSize)
	b = binary.LittleEndian.AppendUint64(b, d.Length)
	b = binary.LittleEndian.AppendUint32(b, d.Parts)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, d.ID)
	return binary.LittleEndian.AppendUint64(b, d.Sum)
}

// DecodeDescriptor reads a descriptor Encode wrote, checking that its
// figures agree (a descriptor's checksum held, so a disagreement is a
// writer's bug or a damage the checksum missed).
func DecodeDescriptor(b []byte) (Descriptor, bool) {
	if len(b) != DescriptorSize || binary.LittleEndian.Uint32(b) != descriptorMagic || binary.LittleEndian.Uint32(b[20:]) != 0 {
		return Descriptor{}, false
	}
	d := Descriptor{
		PartSize: binary.LittleEndian.Uint32(b[4:]),
		Length:   binary.LittleEndian.Uint64(b[8:]),
		Parts:    binary.LittleEndian.Uint32(b[16:]),
		ID:       binary.LittleEndian.Uint64(b[24:]),
		Sum:      binary.LittleEndian.Uint64(b[32:]),
	}
	if d.PartSize == 0 || d.ID == 0 || uint64(d.Parts) != (d.Length+uint64(d.PartSize)-1)/uint64(d.PartSize) {
		return Descriptor{}, false
	}
	return d, true
}

// PartBounds is where part i of the value lies in it.
func (d *Descriptor) PartBounds(i uint32) (from, to uint64) {
	from = uint64(i) * uint64(d.PartSize)
	return from, min(from+uint64(d.PartSize), d.Length)
}

// PartKey appends to b the key of part i of the large value id whose
// owner key hashes to owner.
func PartKey(b []byte, id uint64, i uint32, owner uint64) []byte {
	b = binary.LittleEndian.AppendUint64(b, id)
	b = binary.LittleEndian.AppendUint32(b, i)
	return binary.LittleEndian.AppendUint64(b, owner)
}

// ParsePartKey splits a part key into its fields.
func ParsePartKey(k []byte) (id uint64, i uint32, owner uint64, ok bool) {
	if len(k) != PartKeySize {
		return 0, 0, 0, false
	}
	return binary.LittleEndian.Uint64(k), binary.LittleEndian.Uint32(k[8:]), binary.LittleEndian.Uint64(k[12:]), true
}

// PartSize is the size of the parts a large value is cut into in this
// layout: 64 KiB, or a quarter of what a tier holds less a part entry's
// header and key where that is less, so that a part finds room in a tier
// that is not empty. 0: the tiers are too small for parts.
func (l *Layout) PartSize() int {
	p := min(64<<10, (l.MaxEntryBytes()-entryHeaderSize-PartKeySize)/4)
	if !l.LargeValues || p < minPartSize {
		return 0
	}
	return int(p)
}

// minPartSize is the smallest part worth cutting a value into.
const minPartSize = 256

// Large is what a key holds, as ReadLarge found it.
type Large struct {
	Found bool       // the key is present
	Large bool       // its value is large: Desc says where
	Desc  Descriptor // when Large
}

// ReadLarge appends key's value to dst if it is small, or reports its
// descriptor if it is large, from one consistent read. A descriptor that
// does not decode is ErrCorrupt.
func (s *Segment) ReadLarge(hash uint64, key, dst []byte) ([]byte, Large, error) {
	start := len(dst)
	var got Large
	bad := false
	_, err := keyedRead(&s, hash, "get", func() bool {
		dst, got, bad = dst[:start], Large{}, false
		loc, f, ok := s.find(hash, key)
		if !ok || !f {
			return ok
		}
		got.Found = true
		v := s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)
		if loc.kind == 0 {
			dst = append(dst, v...)
			return true
		}
		got.Large = true
		got.Desc, ok = DecodeDescriptor(v)
		bad = !ok
		return true
	})
	if err == nil && bad {
		err = s.corrupt(-1, fmt.Sprintf("the descriptor of key %s does not decode", quoteKey(bytes.Clone(key))))
	}
	if err != nil {
		return dst[:start], Large{}, err
	}
	return dst, got, nil
}

// ReadLocked runs fn under the segment's read lock, which holds off every
// change of a value in it (a swap of a descriptor among them). fn may read
// this segment (its reads then never wait for the lock again: the sequence
// cannot move) and take other segments' read locks, never a write or
// update lock. On a read-only mapping, whose lock word cannot be taken, it
// runs fn without the lock and reports false (the caller cannot count on
// the hold).
func (s *Segment) ReadLocked(fn func() error) (held bool, err error) {
	if s.tb.readOnly {
		return false, fn()
	}
	if !s.lock.TryReadLock() {
		s.count(stLockWaits, 1)
		err = s.lock.ReadLock(s.tb.timeout)
		if err != nil {
			err = s.retryAfterTimeout(err, s.lock.ReadLock)
		}
		if err != nil {
			return false, s.lockErr("get", err)
		}
	}
	defer func() { _ = s.lock.ReadUnlock() }()
	return true, fn()
}

// InsertPart stores a part entry under part key key (whose hash is hash):
// an insert only, since the parts of an id are never rewritten. A key
// present already (ids are random: two writers never share one) is
// ErrCorrupt, with nothing written.
func (s *Segment) InsertPart(hash uint64, key, value []byte) error {
	if !s.tb.layout.LargeValues {
		return fmt.Errorf("%w: segment %d: the map has no large values", ErrTooLarge, s.index)
	}
	if err := s.checkSize(key, value); err != nil {
		return err
	}
	s, w, err := s.beginUpdateKeyed("put", hash)
	if err != nil {
		return err
	}
	defer func() { w.endOrAbandon(recover()) }()
	_, found, ok := s.findKind(hash, key, true)
	switch {
	case !ok:
		return s.corrupt(-1, "undecodable entry or tier chain on lookup")
	case found:
		return s.corrupt(-1, "a part key stored twice")
	}
	w.kind = kindPart
	if err := s.insert(&w, hash, key, value); err != nil {
		return err
	}
	atomic.AddUint64(s.parts, 1)
	testStep()
	return nil
}

// GetPart appends the part stored under part key key to dst and reports
// whether there is one.
func (s *Segment) GetPart(hash uint64, key, dst []byte) ([]byte, bool, error) {
	start := len(dst)
	var found bool
	_, err := keyedRead(&s, hash, "get", func() bool {
		dst, found = dst[:start], false
		loc, f, ok := s.findKind(hash, key, true)
		if !ok || !f {
			return ok
		}
		found = true
		dst = append(dst, s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)...)
		return true
	})
	if err != nil {
		return dst[:start], false, err
	}
	return dst, found, nil
}

// DeletePart removes the part stored under part key key and reports
// whether there was one.
func (s *Segment) DeletePart(hash uint64, key []byte) (bool, error) {
	s, w, err := s.beginUpdateKeyed("delete", hash)
	if err != nil {
		return false, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	loc, found, ok := s.findKind(hash, key, true)
	switch {
	case !ok:
		return false, s.corrupt(-1, "undecodable entry or tier chain on lookup")
	case !found:
		return false, nil
	}
	if _, err := s.dropEntry(&w, &loc, "delete"); err != nil {
		return false, err
	}
	atomic.AddUint64(s.parts, ^uint64(0))
	testStep()
	return true, nil
}

// SwapOp is what SwapLarge stores.
type SwapOp int8

const (
	SwapDescriptor SwapOp = iota // value is an encoded Descriptor
	SwapValue                    // value is a small value
	SwapDelete                   // remove the key
)

// SwapLarge changes what key holds under the segment's lock: stores a
// descriptor or a small value over whatever the key holds, or deletes it,
// provided cond (if not nil) accepts what it holds now: cur, and the
// current small value (valid only during the call). done reports whether
// it changed anything (cond refused, or a delete of an absent key, did
// not); old is what the key held before, whose parts, if it was large,
// the caller deletes after this returns.
func (s *Segment) SwapLarge(hash uint64, key []byte, op SwapOp, value []byte, cond func(cur Large, small []byte) bool) (old Large, done bool, err error) {
	if !s.tb.layout.LargeValues {
		return Large{}, false, fmt.Errorf("%w: segment %d: the map has no large values", ErrTooLarge, s.index)
	}
	if op != SwapDelete {
		if err := s.checkSize(key, value); err != nil {
			return Large{}, false, err
		}
	}
	s, w, err := s.beginUpdateKeyed("put", hash)
	if err != nil {
		return Large{}, false, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	loc, found, ok := s.find(hash, key)
	if !ok {
		return Large{}, false, s.corrupt(loc.tier.index, "undecodable entry or tier chain on lookup")
	}
	var small []byte
	if found {
		old.Found = true
		v := s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)
		if loc.kind != 0 {
			old.Large = true
			if old.Desc, ok = DecodeDescriptor(v); !ok {
				return Large{}, false, s.corrupt(loc.tier.index, fmt.Sprintf("the descriptor of key %s does not decode", quoteKey(bytes.Clone(key))))
			}
		} else {
			small = v
		}
	}
	if cond != nil && !cond(old, small) {
		return old, false, nil
	}
	switch {
	case op == SwapDelete && !found:
		return old, false, nil
	case op == SwapDelete:
		if _, err := s.dropEntry(&w, &loc, "delete"); err != nil {
			return Large{}, false, err
		}
		s.count(stDeletes, 1)
		return old, true, nil
	}
	if op == SwapDescriptor {
		w.kind = kindDescriptor
	}
	if found {
		err = s.replace(&w, hash, &loc, key, value)
	} else {
		err = s.insert(&w, hash, key, value)
	}
	if err != nil {
		return Large{}, false, err
	}
	s.countLocked(stPuts)
	return old, true, nil
}

// PartEntry is a part entry as LargeIndex found it.
type PartEntry struct {
	Key   []byte // the part key (see PartKey)
	Bytes int    // the part's value length
}

// DescriptorEntry is a descriptor as LargeIndex found it.
type DescriptorEntry struct {
	Key  []byte
	Desc Descriptor
}

// LargeIndex lists, from one consistent read of the segment, the
// descriptors it holds (that decode) and its part entries: what Check and
// Repair match up to find parts no descriptor names, and descriptors
// whose parts are missing.
func (s *Segment) LargeIndex() (descs []DescriptorEntry, parts []PartEntry, err error) {
	if !s.tb.layout.LargeValues {
		return nil, nil, nil
	}
	err = s.consistentRead("check", func() bool {
		descs, parts = descs[:0], parts[:0]
		_, err := s.walk(func(head, key, value []byte) {
			switch _, kind := splitKeyLen(binary.LittleEndian.Uint32(head[ehKeyLen:])); kind {
			case kindDescriptor:
				if d, ok := DecodeDescriptor(value); ok {
					descs = append(descs, DescriptorEntry{Key: bytes.Clone(key), Desc: d})
				}
			case kindPart:
				parts = append(parts, PartEntry{Key: bytes.Clone(key), Bytes: len(value)})
			}
		}, func() {})
		return err == nil
	})
	return descs, parts, err
}
