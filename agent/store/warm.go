package store

import "github.com/kvmesh/kvmesh/policy"

// warm asks for a disk-resident block to be copied into memory in the
// background; when the queue is full the request is dropped, since a warm-up
// is only ever an optimisation.
func (s *Store) warm(id uint64) {
	select {
	case s.warmCh <- id:
	default:
	}
}

func (s *Store) warmLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case id := <-s.warmCh:
			if err := s.promote(id); err != nil {
				s.log.Debug("warm-up skipped", "block", id, "err", err)
			}
		}
	}
}

// promote copies a block from disk into memory.
func (s *Store) promote(id uint64) error {
	s.mu.Lock()
	b := s.byID[id]
	if b == nil || b.mem != nil || !b.onDisk {
		s.mu.Unlock()
		return nil
	}
	b.leases++
	s.mu.Unlock()

	al, err := s.allocMem(b.size)
	if err == nil {
		_, err = s.disk.Read(b.ns, b.key, b.version, s.arena.Slices(al))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.unlease(b)
	if err != nil {
		if al != nil {
			s.arena.Release(al)
		}
		return err
	}
	if b.dead || b.mem != nil {
		s.arena.Release(al)
		return nil
	}
	b.mem = al
	s.stats.prefetched.Add(1)
	s.observe(policy.TierMemory, b.event(policy.EventInsert, policy.TierMemory, s.now()))
	return nil
}
