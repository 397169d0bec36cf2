package policy

import "container/list"

// LRU evicts the least recently inserted or hit block. It is the native
// eviction policy of every tier and the yardstick for the others.
type LRU struct {
	order *list.List // front: most recently used
	at    map[uint64]*list.Element
}

// NewLRU returns an empty LRU.
func NewLRU() *LRU {
	return &LRU{order: list.New(), at: make(map[uint64]*list.Element)}
}

// Observe implements Eviction.
func (l *LRU) Observe(events []Event) {
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case EventInsert, EventHit:
			if el, ok := l.at[e.ID]; ok {
				l.order.MoveToFront(el)
			} else if e.Kind == EventInsert {
				l.at[e.ID] = l.order.PushFront(e.ID)
			}
		case EventRemove, EventDemote:
			if el, ok := l.at[e.ID]; ok {
				l.order.Remove(el)
				delete(l.at, e.ID)
			}
		}
	}
}

// Victims implements Eviction.
func (l *LRU) Victims(dst []uint64, max int) []uint64 {
	for el := l.order.Back(); el != nil && max > 0; el = el.Prev() {
		dst = append(dst, el.Value.(uint64))
		max--
	}
	return dst
}

// Len is the number of blocks tracked.
func (l *LRU) Len() int { return len(l.at) }

// Has reports whether the block is tracked.
func (l *LRU) Has(id uint64) bool {
	_, ok := l.at[id]
	return ok
}
