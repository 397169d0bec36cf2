package store

import (
	"bytes"
	"errors"

	"github.com/kvmesh/kvmesh/agent/disktier"
	"github.com/kvmesh/kvmesh/agent/memtier"
	"github.com/kvmesh/kvmesh/policy"
)

// PutOptions qualify a Put.
type PutOptions struct {
	Durability policy.Durability // when the Put returns; the admission policy may raise it
	Tokens     uint32            // tokens the block holds, if known
	Parent     []byte            // key of the previous block of its chain, if known
	ChainPos   uint32            // position in its chain, if known

	// Cluster mode (agent/mesh). Replica marks a copy stored for another
	// member: Replicas, its writer's Decision.Replicas, is recorded as the
	// block's placement in place of this store's own answer, which still
	// decides the copy's disk writes and acknowledgement floor.
	Replica  bool
	Replicas uint8
	// Admitted, if not nil, receives the admission decision recorded for
	// the block (whatever the Put's outcome).
	Admitted *policy.Decision
}

// Put stores the concatenation of value's parts under (ns, key) and returns
// once it is as durable as asked. It replaces any block under the key.
func (s *Store) Put(ns string, key []byte, value [][]byte, opt PutOptions) error {
	ns, err := s.check(ns, key)
	if err != nil {
		return err
	}
	var size uint64
	for _, p := range value {
		size += uint64(len(p))
	}
	if size > s.cfg.MaxBlockSize {
		return errorf(CodeTooLarge, "%d-byte value exceeds the %d-byte block limit", size, s.cfg.MaxBlockSize)
	}
	if opt.Durability > policy.DurableDisk {
		return errorf(CodeUnavailable, "durability %v needs cluster mode", opt.Durability)
	}
	if opt.Durability == policy.DurableDisk && s.disk == nil {
		return errorf(CodeUnavailable, "durability disk: this agent has no disk tier")
	}
	if s.isClosed() {
		return errorf(CodeUnavailable, "store closed")
	}

	al, err := s.allocMem(size)
	if err != nil {
		return err
	}
	if err := copyGuarded(func() { s.arena.WriteVec(al, value) }); err != nil {
		s.mu.Lock()
		s.arena.Release(al)
		s.mu.Unlock()
		return err
	}

	s.mu.Lock()
	s.version++ // the disk file's version: new per write, unlike the id (recover keeps the newest)
	now := s.now()
	b := &block{id: s.idFor(indexKey(ns, key)), ns: ns, key: bytes.Clone(key), size: size, tokens: opt.Tokens,
		chainPos: opt.ChainPos, version: s.version, mem: al, lastUsed: now}
	if len(opt.Parent) > 0 {
		b.parent = bytes.Clone(opt.Parent)
		b.parentID = s.knownID(indexKey(ns, opt.Parent))
	}
	ev := b.event(policy.EventInsert, policy.TierMemory, now)
	if d := s.admission.Admit([]policy.Event{ev}, nil); len(d) == 1 {
		b.admitted = d[0]
	}
	if opt.Replica {
		b.admitted.Replicas = opt.Replicas
	}
	if opt.Admitted != nil {
		*opt.Admitted = b.admitted
	}
	ack := max(opt.Durability, b.admitted.Ack)
	if ack > policy.DurableDisk {
		ack = policy.DurableDisk // replicas are the mesh's to honour
	}
	if s.disk == nil {
		ack = policy.DurableMemory
	}
	if old := s.blocks[indexKey(ns, key)]; old != nil {
		s.retire(old)
	}
	s.publish(b)
	s.observe(policy.TierMemory, ev)
	toDisk := s.disk != nil && (ack >= policy.DurableDisk || b.admitted.Disk == policy.DiskNow)
	if !toDisk {
		s.mu.Unlock()
		return nil
	}
	b.leases++
	b.demoting = true
	s.mu.Unlock()

	err = s.writeDisk(b, ack >= policy.DurableDisk)

	s.mu.Lock()
	defer s.mu.Unlock()
	b.demoting = false
	if err != nil && ack >= policy.DurableDisk {
		s.retire(b) // not acknowledged: leave nothing behind
	}
	s.unlease(b)
	if err != nil && ack < policy.DurableDisk {
		s.log.Warn("write-through to disk failed; block kept in memory", "err", err)
		return nil
	}
	return err
}

// Get copies the block under (ns, key) into dst, a vector of buffers filled
// in order whose lengths must add up to the block's size, and returns that
// size. Use Size first when the size is not known.
func (s *Store) Get(ns string, key []byte, dst [][]byte) (uint64, error) {
	b, mem, err := s.lease(ns, key)
	if err != nil {
		return 0, err
	}
	var total uint64
	for _, p := range dst {
		total += uint64(len(p))
	}
	if total != b.size {
		s.mu.Lock()
		s.unlease(b)
		s.mu.Unlock()
		return 0, errorf(CodeBufferSize, "buffers of %d bytes for a %d-byte block", total, b.size)
	}
	if mem != nil { // the lease keeps these pages from being released
		err := copyGuarded(func() { s.arena.ReadVec(mem, dst) })
		s.mu.Lock()
		s.unlease(b)
		s.mu.Unlock()
		if err != nil {
			return 0, err
		}
		return b.size, nil
	}
	meta, err := s.disk.Read(b.ns, b.key, b.version, dst)
	if err == nil && b.hasCRC && meta.CRC != b.crc {
		err = disktier.ErrCorrupt
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unlease(b)
	if err != nil {
		if errors.Is(err, disktier.ErrCorrupt) || errors.Is(err, disktier.ErrNotFound) {
			s.stats.corrupt.Add(1)
			s.log.Error("dropped a corrupt block", "namespace", b.ns, "key", string(b.key), "err", err)
			s.retire(b)
			return 0, errorf(CodeCorrupt, "stored copy failed its checksum and was dropped")
		}
		return 0, errorf(CodeIO, "read block file: %v", err)
	}
	s.warm(b.id)
	return b.size, nil
}

// Size returns the size of the block under (ns, key).
func (s *Store) Size(ns string, key []byte) (uint64, error) {
	ns, err := s.check(ns, key)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blocks[indexKey(ns, key)]
	if b == nil {
		return 0, errorf(CodeNotFound, "no block under the key")
	}
	return b.size, nil
}

// lease looks a block up for reading, counting the hit or miss, and holds
// it in place until unlease. It returns the block's memory copy, if any, as
// of the lookup.
func (s *Store) lease(ns string, key []byte) (*block, memtier.Alloc, error) {
	ns, err := s.check(ns, key)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ik := indexKey(ns, key)
	b := s.blocks[ik]
	if b == nil {
		// Each tier's policy hears of the miss under the key's id, so it
		// can tell a block it evicted too soon (none if no id is kept).
		ev := policy.Event{Time: s.now(), ID: s.missID(ik), Kind: policy.EventMiss}
		s.stats.misses[policy.TierMemory].Add(1)
		if ev.ID != 0 {
			s.observe(policy.TierMemory, ev)
		}
		if s.disk != nil {
			s.stats.misses[policy.TierDisk].Add(1)
			if ev.Tier = policy.TierDisk; ev.ID != 0 {
				s.observe(policy.TierDisk, ev)
			}
		}
		return nil, nil, errorf(CodeNotFound, "no block under the key")
	}
	s.touch(b)
	b.leases++
	return b, b.mem, nil
}

// touch records a hit on the nearest tier holding the block. mu held.
func (s *Store) touch(b *block) {
	now := s.now()
	b.hits++
	b.lastUsed = now
	tier := policy.TierMemory
	if b.mem == nil {
		tier = policy.TierDisk
		s.stats.misses[policy.TierMemory].Add(1)
		s.observe(policy.TierMemory, b.event(policy.EventMiss, policy.TierMemory, now))
	}
	s.stats.hits[tier].Add(1)
	s.observe(tier, b.event(policy.EventHit, tier, now))
}

// Exist reports, per key, whether a block is stored under it.
func (s *Store) Exist(ns string, ks [][]byte) ([]bool, error) {
	found, _, err := s.lookup(ns, ks, false)
	return found, err
}

// Query returns the length of the longest leading run of ks that is
// stored, and warms that run into memory as the prefetch policy says.
func (s *Store) Query(ns string, ks [][]byte) (int, error) {
	_, run, err := s.lookup(ns, ks, true)
	return run, err
}

func (s *Store) lookup(ns string, ks [][]byte, stopAtMiss bool) ([]bool, int, error) {
	ns, err := s.checkNS(ns)
	if err != nil {
		return nil, 0, err
	}
	for _, k := range ks {
		if _, err := s.check(ns, k); err != nil {
			return nil, 0, err
		}
	}
	found := make([]bool, len(ks))
	s.mu.Lock()
	defer s.mu.Unlock()
	run, inRun := 0, true
	lookup := make([]policy.Event, 0, len(ks))
	now := s.now()
	for i, k := range ks {
		ik := indexKey(ns, k)
		b := s.blocks[ik]
		found[i] = b != nil
		if b == nil {
			inRun = false
			if stopAtMiss {
				lookup = append(lookup, policy.Event{Time: now, ID: s.missID(ik), Kind: policy.EventMiss, ChainPos: uint32(i)})
				break
			}
			continue
		}
		if inRun {
			run++
		}
		tier := policy.TierMemory
		if b.mem == nil {
			tier = policy.TierDisk
		}
		ev := b.event(policy.EventHit, tier, now)
		ev.ChainPos = uint32(i)
		lookup = append(lookup, ev)
	}
	if stopAtMiss {
		for _, id := range s.prefetch.Prefetch(lookup, nil) {
			s.warm(id)
		}
	}
	return found, run, nil
}

// Remove deletes the block under (ns, key); removing a missing key is not
// an error.
func (s *Store) Remove(ns string, key []byte) error {
	ns, err := s.check(ns, key)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.blocks[indexKey(ns, key)]; b != nil {
		s.retire(b)
	}
	return nil
}

// Clear deletes every block of a namespace and returns how many there were.
func (s *Store) Clear(ns string) (int, error) {
	ns, err := s.checkNS(ns)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range s.byID {
		if b.ns == ns {
			s.retire(b)
			n++
		}
	}
	return n, nil
}

// Pin keeps the block under (ns, key) from being evicted from any tier
// until a matching Unpin.
func (s *Store) Pin(ns string, key []byte) error { return s.pin(ns, key, 1) }

// Unpin undoes one Pin.
func (s *Store) Unpin(ns string, key []byte) error { return s.pin(ns, key, -1) }

func (s *Store) pin(ns string, key []byte, delta int32) error {
	ns, err := s.check(ns, key)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blocks[indexKey(ns, key)]
	if b == nil {
		return errorf(CodeNotFound, "no block under the key")
	}
	if b.pins+delta < 0 {
		return errorf(CodeInvalidArgument, "block is not pinned")
	}
	b.pins += delta
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
