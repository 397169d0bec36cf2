package store

import "container/list"

// Block ids are stable per key: a key keeps the id it was first given for
// as long as the store holds a block under it or remembers it, so a policy
// recognises a block that returns after eviction (a "ghost") and a lookup's
// miss names the block it misses, as in the replay lab (docs/policy-abi.md).
//
// A key with a block in the index has its id in that block. The keys
// without one that are remembered — blocks that left, and keys a lookup
// missed — form the ghost table, bounded and forgetting the least recently
// seen first. Ids come from one counter and are never handed out twice, so
// an id never names two keys: a forgotten key that returns gets a new one.

// DefaultGhostsPerBlock and MinGhosts size the ghost table when
// Config.RememberedKeys is 0: DefaultGhostsPerBlock keys per block indexed,
// and never fewer than MinGhosts.
const (
	DefaultGhostsPerBlock = 4
	MinGhosts             = 4096
)

// ghosts remembers the ids of keys that have no block in the index. Guarded
// by Store.mu.
type ghosts struct {
	order *list.List               // of *ghost; front: most recently seen
	at    map[string]*list.Element // by indexKey
}

type ghost struct {
	ik string
	id uint64
}

func newGhosts() ghosts {
	return ghosts{order: list.New(), at: make(map[string]*list.Element)}
}

// ghostLimit is how many keys without a block the store remembers now. mu
// held.
func (s *Store) ghostLimit() int {
	switch n := s.cfg.RememberedKeys; {
	case n > 0:
		return n
	case n < 0:
		return 0
	}
	return max(MinGhosts, DefaultGhostsPerBlock*len(s.blocks))
}

// knownID is the id of the key with index key ik, or 0 if the store
// neither holds nor remembers it. It changes nothing. mu held.
func (s *Store) knownID(ik string) uint64 {
	if b := s.blocks[ik]; b != nil {
		return b.id
	}
	if el := s.ghosts.at[ik]; el != nil {
		return el.Value.(*ghost).id
	}
	return 0
}

// idFor is the id a new block under ik takes: the key's own if the store
// holds or remembers it, else a fresh one. mu held.
func (s *Store) idFor(ik string) uint64 {
	if id := s.knownID(ik); id != 0 {
		return id
	}
	s.nextID++
	return s.nextID
}

// publish puts b in the index under its key, which no other live block
// holds (retire the old one first), and takes the key out of the ghost
// table. mu held.
func (s *Store) publish(b *block) {
	ik := indexKey(b.ns, b.key)
	s.blocks[ik] = b
	s.byID[b.id] = b
	if el := s.ghosts.at[ik]; el != nil {
		s.ghosts.order.Remove(el)
		delete(s.ghosts.at, ik)
	}
}

// missID is the id of a key a lookup found no block under: the remembered
// one, seen again now, or a fresh one the key keeps from now on, so a Put
// that follows the miss stores the block the miss named. 0 when the store
// remembers no keys. mu held; the key has no block in the index.
func (s *Store) missID(ik string) uint64 {
	if el := s.ghosts.at[ik]; el != nil {
		s.ghosts.order.MoveToFront(el)
		return el.Value.(*ghost).id
	}
	if s.ghostLimit() == 0 {
		return 0
	}
	s.nextID++
	s.remember(ik, s.nextID)
	return s.nextID
}

// remember adds a key that no longer has a block to the ghost table,
// forgetting the least recently seen keys beyond the limit. mu held.
func (s *Store) remember(ik string, id uint64) {
	if el := s.ghosts.at[ik]; el != nil {
		el.Value.(*ghost).id = id
		s.ghosts.order.MoveToFront(el)
	} else {
		s.ghosts.at[ik] = s.ghosts.order.PushFront(&ghost{ik: ik, id: id})
	}
	for limit := s.ghostLimit(); s.ghosts.order.Len() > limit; {
		el := s.ghosts.order.Back()
		s.ghosts.order.Remove(el)
		delete(s.ghosts.at, el.Value.(*ghost).ik)
	}
}

// rememberedKeys is how many keys without a stored block the store
// remembers the ids of.
func (s *Store) rememberedKeys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ghosts.order.Len()
}
