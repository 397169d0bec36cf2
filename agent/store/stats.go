package store

import "github.com/kvmesh/kvmesh/policy"

// TierStats describes one tier at a moment.
type TierStats struct {
	Tier          string
	CapacityBytes uint64
	UsedBytes     uint64
	Blocks        uint64
	Hits          uint64
	Misses        uint64
	Evictions     uint64
}

// Stats is a snapshot of the store.
type Stats struct {
	Tiers          []TierStats
	Namespaces     []string
	Blocks         uint64 // distinct blocks in any tier
	Pinned         uint64
	CorruptDropped uint64 // blocks dropped for a failed checksum
	Demotions      uint64 // memory → disk moves
	Prefetched     uint64 // disk → memory warm-ups
	DiskWriteErrs  uint64
	MaxBlockSize   uint64
}

// Stat returns a snapshot of the store.
func (s *Store) Stat() Stats {
	s.mu.Lock()
	var memBlocks, diskBlocks, pinned uint64
	for _, b := range s.byID {
		if b.mem != nil {
			memBlocks++
		}
		if b.onDisk {
			diskBlocks++
		}
		if b.pins > 0 {
			pinned++
		}
	}
	st := Stats{
		Namespaces:     s.Namespaces(),
		Blocks:         uint64(len(s.byID)),
		Pinned:         pinned,
		CorruptDropped: s.stats.corrupt.Load(),
		Demotions:      s.stats.demotions.Load(),
		Prefetched:     s.stats.prefetched.Load(),
		DiskWriteErrs:  s.stats.diskWriteErrors.Load(),
		MaxBlockSize:   s.cfg.MaxBlockSize,
	}
	memUsed := s.arena.Capacity() - s.arena.FreeBytes()
	diskUsed := s.diskUsed
	s.mu.Unlock()

	tier := func(t policy.Tier, capacity, used, blocks uint64) TierStats {
		return TierStats{Tier: t.String(), CapacityBytes: capacity, UsedBytes: used, Blocks: blocks,
			Hits: s.stats.hits[t].Load(), Misses: s.stats.misses[t].Load(), Evictions: s.stats.evictions[t].Load()}
	}
	st.Tiers = append(st.Tiers, tier(policy.TierMemory, s.arena.Capacity(), memUsed, memBlocks))
	if s.disk != nil {
		st.Tiers = append(st.Tiers, tier(policy.TierDisk, s.cfg.DiskCapacity, diskUsed, diskBlocks))
	}
	return st
}
