package store

// BlockRef names one stored block.
type BlockRef struct {
	NS   string
	Key  []byte
	Size uint64
	// Replicas is the block's placement as admitted (Decision.Replicas;
	// the writer's, for a copy stored for another member).
	Replicas uint8
}

// List returns every block indexed at the moment of the call. The keys are
// the store's own (immutable) copies; the blocks may be gone by the time
// the caller looks.
func (s *Store) List() []BlockRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]BlockRef, 0, len(s.byID))
	for _, b := range s.byID {
		out = append(out, BlockRef{NS: b.ns, Key: b.key, Size: b.size, Replicas: b.admitted.Replicas})
	}
	return out
}
