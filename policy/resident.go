package policy

import (
	"container/list"
	"slices"
)

// residentSet is what a WasmEviction knows of its tier without running a
// policy of its own: the blocks the tier holds and, for each, a stamp of
// its last insert or hit. It checks the module's answers (an id the tier
// holds, no id twice) and, when the module is taken out of service, seeds
// the native LRU with the tier's blocks in recency order, so the LRU
// answers as if it had observed the whole stream. One open-addressing
// probe per event costs a fraction of running the LRU alongside.
//
// Ids are keys of an open-addressing table with linear probing, at most
// half full; 0 marks an empty entry (no block has id 0).
type residentSet struct {
	e     []residentEntry
	n     int
	mask  uint64
	clock uint64 // stamp of the latest insert or hit
	epoch uint32 // marks the ids of the answer being checked
}

type residentEntry struct {
	id   uint64
	used uint64 // clock at the last insert or hit
	mark uint32 // epoch of the answer that named it last
}

func newResidentSet() *residentSet {
	const size = 1 << 10
	return &residentSet{e: make([]residentEntry, size), mask: size - 1}
}

func (s *residentSet) home(id uint64) uint64 {
	// Fibonacci hashing spreads the store's sequential ids over the table.
	return (id * 0x9E3779B97F4A7C15) >> 32 & s.mask
}

// find returns the index of id's entry, or -1.
func (s *residentSet) find(id uint64) int {
	if id == 0 {
		return -1
	}
	for i := s.home(id); ; i = (i + 1) & s.mask {
		switch s.e[i].id {
		case id:
			return int(i)
		case 0:
			return -1
		}
	}
}

// observe applies events as LRU.Observe would: an insert enters the block
// or makes it the most recent, a hit makes a held block the most recent, a
// remove or demote drops it.
func (s *residentSet) observe(events []Event) {
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case EventInsert:
			s.touch(e.ID, true)
		case EventHit:
			s.touch(e.ID, false)
		case EventRemove, EventDemote:
			s.remove(e.ID)
		}
	}
}

// touch stamps id as the most recently used block, entering it if insert.
func (s *residentSet) touch(id uint64, insert bool) {
	if id == 0 {
		return
	}
	i := s.home(id)
	for ; s.e[i].id != id; i = (i + 1) & s.mask {
		if s.e[i].id == 0 {
			if !insert {
				return
			}
			if 2*(s.n+1) > len(s.e) {
				s.grow()
				s.touch(id, insert)
				return
			}
			s.e[i].id = id
			s.n++
			break
		}
	}
	s.clock++
	s.e[i].used = s.clock
}

func (s *residentSet) remove(id uint64) {
	i := s.find(id)
	if i < 0 {
		return
	}
	// Backward-shift deletion keeps every probe chain unbroken without
	// tombstones.
	j := uint64(i)
	for k := (j + 1) & s.mask; s.e[k].id != 0; k = (k + 1) & s.mask {
		if h := s.home(s.e[k].id); (k-h)&s.mask >= (k-j)&s.mask {
			s.e[j] = s.e[k]
			j = k
		}
	}
	s.e[j] = residentEntry{}
	s.n--
}

func (s *residentSet) grow() {
	old := s.e
	s.e = make([]residentEntry, 2*len(old))
	s.mask = uint64(len(s.e) - 1)
	for _, e := range old {
		if e.id != 0 {
			i := s.home(e.id)
			for s.e[i].id != 0 {
				i = (i + 1) & s.mask
			}
			s.e[i] = e
		}
	}
}

// has reports whether the tier holds id.
func (s *residentSet) has(id uint64) bool { return s.find(id) >= 0 }

// len is how many blocks the tier holds.
func (s *residentSet) len() int { return s.n }

// newAnswer starts checking an answer for duplicates.
func (s *residentSet) newAnswer() {
	s.epoch++
	if s.epoch == 0 { // wrapped: old marks could collide
		for i := range s.e {
			s.e[i].mark = 0
		}
		s.epoch = 1
	}
}

// name checks one id of the answer: the tier must hold it and the answer
// must not have named it already.
func (s *residentSet) name(id uint64) (held, dup bool) {
	i := s.find(id)
	if i < 0 {
		return false, false
	}
	if s.e[i].mark == s.epoch {
		return true, true
	}
	s.e[i].mark = s.epoch
	return true, false
}

// lru returns a native LRU holding the tier's blocks in the order of their
// last use, as an LRU fed every event would hold them.
func (s *residentSet) lru() *LRU {
	held := make([]residentEntry, 0, s.n)
	for _, e := range s.e {
		if e.id != 0 {
			held = append(held, e)
		}
	}
	slices.SortFunc(held, func(a, b residentEntry) int {
		switch {
		case a.used < b.used:
			return -1
		case a.used > b.used:
			return 1
		}
		return 0
	})
	l := &LRU{order: list.New(), at: make(map[uint64]*list.Element, len(held))}
	for _, e := range held {
		l.at[e.id] = l.order.PushFront(e.id)
	}
	return l
}
