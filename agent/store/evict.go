package store

import (
	"errors"
	"slices"
	"syscall"

	"github.com/kvmesh/kvmesh/agent/disktier"
	"github.com/kvmesh/kvmesh/agent/memtier"
	"github.com/kvmesh/kvmesh/policy"
)

// allocMem takes memory for size bytes, evicting blocks as the memory
// eviction policy chooses; a victim admitted to disk on eviction is first
// demoted there. mu is not held on entry.
func (s *Store) allocMem(size uint64) (memtier.Alloc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.arena.Footprint(size) > s.arena.Capacity() {
		return nil, errorf(CodeNoSpace, "a %d-byte block does not fit in %d bytes of memory", size, s.arena.Capacity())
	}
	for {
		if al, ok := s.arena.Alloc(size); ok {
			return al, nil
		}
		v := s.victim(policy.TierMemory)
		if v == nil {
			return nil, errorf(CodeNoSpace, "memory full: every block is being read or pinned")
		}
		if v.admitted.Disk == policy.DiskOnEvict && !v.onDisk && s.disk != nil {
			// Demote outside the lock; the lease and the flag keep the
			// victim in place and keep others from demoting it too.
			v.demoting = true
			v.leases++
			s.mu.Unlock()
			err := s.writeDisk(v, false)
			s.mu.Lock()
			v.demoting = false
			s.unlease(v)
			if err == nil {
				s.stats.demotions.Add(1)
				continue // pick again: the victim may have been read meanwhile
			}
			if v.dead {
				continue // retired meanwhile: its pages went with its lease
			}
			s.log.Warn("demotion to disk failed; evicting from memory anyway", "err", err)
		}
		s.dropMem(v, policy.EventRemove)
	}
}

// victim returns the block the tier's policy would evict first among those
// that may be evicted now, or nil if none may. mu held.
func (s *Store) victim(tier policy.Tier) *block {
	s.flush(tier)
	var ids []uint64
	for want := 16; ; want *= 4 {
		ids = s.eviction[tier].Victims(ids[:0], want)
		for _, id := range ids {
			if b := s.byID[id]; b != nil && s.evictable(b, tier) {
				return b
			}
		}
		if len(ids) < want || want >= len(s.byID) {
			break // the policy has named all it will, or more ids than there are blocks
		}
	}
	// The policy named nothing evictable: fall back to any evictable block,
	// so a policy's mistake costs hit rate, never availability.
	for _, b := range s.byID {
		if s.evictable(b, tier) {
			return b
		}
	}
	return nil
}

func (s *Store) evictable(b *block, tier policy.Tier) bool {
	if b.leases > 0 || b.pins > 0 || b.demoting {
		return false
	}
	if tier == policy.TierMemory {
		return b.mem != nil
	}
	return b.onDisk
}

// dropMem takes a block out of memory. A block left in no tier leaves the
// index. mu held; the block holds no lease.
func (s *Store) dropMem(b *block, kind policy.EventKind) {
	s.arena.Release(b.mem)
	b.mem = nil
	if b.onDisk {
		kind = policy.EventDemote
	}
	s.observe(policy.TierMemory, b.event(kind, policy.TierMemory, s.now()))
	s.stats.evictions[policy.TierMemory].Add(1)
	if !b.onDisk {
		s.unindex(b)
	}
}

// dropDisk deletes a block's disk copy. mu held; the block holds no lease.
func (s *Store) dropDisk(b *block) {
	if err := s.disk.Delete(b.ns, b.key, b.version); err != nil {
		s.log.Warn("delete block file", "err", err)
	}
	b.onDisk = false
	s.diskUsed -= b.diskFoot
	s.observe(policy.TierDisk, b.event(policy.EventRemove, policy.TierDisk, s.now()))
	s.stats.evictions[policy.TierDisk].Add(1)
	if b.mem == nil {
		s.unindex(b)
	}
}

// unindex removes a block from the index; its key keeps the id in the
// ghost table. mu held.
func (s *Store) unindex(b *block) {
	ik := indexKey(b.ns, b.key)
	if s.blocks[ik] == b {
		delete(s.blocks, ik)
		s.remember(ik, b.id)
	}
	if s.byID[b.id] == b { // a newer block of the key may hold the id
		delete(s.byID, b.id)
	}
	b.dead = true
}

// retire takes a live block out of the index and out of every tier, now or,
// if it is being read, when its last lease goes. mu held.
func (s *Store) retire(b *block) {
	if b.dead {
		return
	}
	now := s.now()
	if b.mem != nil {
		s.observe(policy.TierMemory, b.event(policy.EventRemove, policy.TierMemory, now))
	}
	if b.onDisk {
		s.observe(policy.TierDisk, b.event(policy.EventRemove, policy.TierDisk, now))
	}
	s.unindex(b)
	if b.leases == 0 {
		s.release(b)
	}
}

// release frees a dead block's storage. mu held; no lease outstanding.
func (s *Store) release(b *block) {
	if b.mem != nil {
		s.arena.Release(b.mem)
		b.mem = nil
	}
	if b.onDisk {
		if err := s.disk.Delete(b.ns, b.key, b.version); err != nil {
			s.log.Warn("delete block file", "err", err)
		}
		b.onDisk = false
		s.diskUsed -= b.diskFoot
	}
}

// unlease drops a read lease, releasing a dead block's storage with the
// last one. mu held.
func (s *Store) unlease(b *block) {
	b.leases--
	if b.leases == 0 && b.dead {
		s.release(b)
	}
}

// reserveDisk makes room for n bytes of block files, deleting disk copies
// as the disk eviction policy chooses. mu held.
func (s *Store) reserveDisk(n uint64) error {
	if n > s.cfg.DiskCapacity {
		return errorf(CodeNoSpace, "a %d-byte block file does not fit in %d bytes of disk", n, s.cfg.DiskCapacity)
	}
	for s.diskUsed+n > s.cfg.DiskCapacity {
		v := s.victim(policy.TierDisk)
		if v == nil {
			return errorf(CodeNoSpace, "disk full: every block is being read or pinned")
		}
		s.dropDisk(v)
	}
	s.diskUsed += n
	return nil
}

// writeDisk copies a block held in memory (and leased by the caller, or
// not yet published) to a disk file, fsync'd when sync is set. mu is not
// held on entry.
func (s *Store) writeDisk(b *block, sync bool) error {
	if s.disk == nil {
		return errorf(CodeUnavailable, "this agent has no disk tier")
	}
	parts := s.arena.Slices(b.mem)
	crc := uint32(0)
	for _, p := range parts {
		crc = disktier.UpdateChecksum(crc, p)
	}
	meta := &disktier.Meta{Namespace: b.ns, Key: b.key, Parent: b.parent, Size: b.size,
		Tokens: b.tokens, CRC: crc, Version: b.version}
	foot := disktier.Footprint(meta)

	s.mu.Lock()
	if b.onDisk {
		s.mu.Unlock()
		return nil
	}
	err := s.reserveDisk(foot)
	s.mu.Unlock()
	if err != nil {
		return err
	}

	err = s.disk.Write(meta, parts, sync)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.diskUsed -= foot
		s.stats.diskWriteErrors.Add(1)
		if errors.Is(err, syscall.ENOSPC) {
			return errorf(CodeNoSpace, "disk full: %v", err)
		}
		return errorf(CodeIO, "write block file: %v", err)
	}
	b.onDisk, b.diskFoot, b.crc, b.hasCRC = true, foot, crc, true
	if b.dead {
		if b.leases == 0 {
			s.release(b)
		}
		return nil
	}
	s.observe(policy.TierDisk, b.event(policy.EventInsert, policy.TierDisk, s.now()))
	return nil
}

func sortByLastUsed(bs []*block) {
	slices.SortFunc(bs, func(x, y *block) int {
		switch {
		case x.lastUsed < y.lastUsed:
			return -1
		case x.lastUsed > y.lastUsed:
			return 1
		}
		return 0
	})
}
