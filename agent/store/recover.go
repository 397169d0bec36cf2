package store

import (
	"github.com/kvmesh/kvmesh/agent/disktier"
	"github.com/kvmesh/kvmesh/agent/keys"
	"github.com/kvmesh/kvmesh/policy"
)

// recover rebuilds the index from the block files on disk. Of several
// versions of one key only the newest is kept. Blocks of namespaces no
// longer served stay indexed, unreachable, until eviction takes them.
func (s *Store) recover() error {
	newest := make(map[string]*block)
	corrupt, err := s.disk.Scan(func(m *disktier.Meta) {
		if keys.Validate(m.Key) != nil {
			return
		}
		b := &block{ns: m.Namespace, key: m.Key, parent: m.Parent, size: m.Size, tokens: m.Tokens,
			version: m.Version, crc: m.CRC, hasCRC: true, onDisk: true,
			diskFoot: disktier.Footprint(m), lastUsed: m.ModTime}
		ik := indexKey(b.ns, b.key)
		if prev := newest[ik]; prev != nil {
			stale := b
			if b.version > prev.version {
				stale, newest[ik] = prev, b
			}
			s.disk.Delete(stale.ns, stale.key, stale.version)
			return
		}
		newest[ik] = b
	})
	if err != nil {
		return err
	}
	s.stats.corrupt.Add(uint64(corrupt))
	s.mu.Lock()
	defer s.mu.Unlock()
	found := make([]*block, 0, len(newest))
	for _, b := range newest {
		found = append(found, b)
	}
	sortByLastUsed(found)
	for _, b := range found {
		s.nextID++
		b.id = s.nextID
		s.version = max(s.version, b.version)
		s.blocks[indexKey(b.ns, b.key)] = b
		s.byID[b.id] = b
		s.diskUsed += b.diskFoot
		s.observe(policy.TierDisk, b.event(policy.EventInsert, policy.TierDisk, b.lastUsed))
	}
	for _, b := range s.byID {
		if p := s.blocks[indexKey(b.ns, b.parent)]; len(b.parent) > 0 && p != nil {
			b.parentID = p.id
		}
	}
	for s.diskUsed > s.cfg.DiskCapacity {
		v := s.victim(policy.TierDisk)
		if v == nil {
			break
		}
		s.dropDisk(v)
	}
	if corrupt > 0 {
		s.log.Warn("dropped corrupt block files at start-up", "count", corrupt)
	}
	s.log.Info("disk tier recovered", "blocks", len(s.byID), "bytes", s.diskUsed)
	return nil
}
