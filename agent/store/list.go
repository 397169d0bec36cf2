package store

// BlockRef names one stored block.
type BlockRef struct {
	NS   string
	Key  []byte
	Size uint64
}

// List returns every block indexed at the moment of the call. The keys are
// the store's own (immutable) copies; the blocks may be gone by the time
// the caller looks.
func (s *Store) List() []BlockRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]BlockRef, 0, len(s.byID))
	for _, b := range s.byID {
		out = append(out, BlockRef{NS: b.ns, Key: b.key, Size: b.size})
	}
	return out
}
