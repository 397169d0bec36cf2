// Command lru is the least-recently-used eviction policy as a wasm module:
// the same victims, in the same order, as the agent's native LRU. It is the
// reference for what the ABI costs (kvmesh bench policy) and the simplest
// example of an eviction policy.
package main

import "github.com/kvmesh/kvmesh/wasm-policies/sdk"

// lru threads a circular doubly linked list through slices, with slot 0 as
// the sentinel (its next is the most recently used block, its prev the
// least). The sentinel makes linking and unlinking branch-free: in a guest
// every taken branch is a deadline check, so fewer branches is most of the
// speed.
type lru struct {
	at         *sdk.IDTable // id -> slot
	ids        []uint64     // slot -> id
	prev, next []int32
	free       []int32
}

func newLRU() *lru {
	return &lru{at: sdk.NewIDTable(1 << 12), ids: []uint64{0}, prev: []int32{0}, next: []int32{0}}
}

func (l *lru) Observe(events []sdk.Event) {
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case sdk.Insert, sdk.Hit:
			s, ok := l.at.Get(e.ID)
			if ok {
				l.unlink(s)
			} else if e.Kind == sdk.Insert {
				s = l.alloc(e.ID)
			} else {
				continue
			}
			l.pushFront(s)
		case sdk.Remove, sdk.Demote:
			if s, ok := l.at.Get(e.ID); ok {
				l.unlink(s)
				l.at.Delete(e.ID)
				l.free = append(l.free, s)
			}
		}
	}
}

func (l *lru) Victims(dst []uint64, max int) []uint64 {
	for s := l.prev[0]; s != 0 && max > 0; s = l.prev[s] {
		dst = append(dst, l.ids[s])
		max--
	}
	return dst
}

func (l *lru) alloc(id uint64) int32 {
	var s int32
	if n := len(l.free); n > 0 {
		s = l.free[n-1]
		l.free = l.free[:n-1]
		l.ids[s] = id
	} else {
		s = int32(len(l.ids))
		l.ids = append(l.ids, id)
		l.prev = append(l.prev, 0)
		l.next = append(l.next, 0)
	}
	l.at.Put(id, s)
	return s
}

func (l *lru) unlink(s int32) {
	p, n := l.prev[s], l.next[s]
	l.next[p] = n
	l.prev[n] = p
}

func (l *lru) pushFront(s int32) {
	first := l.next[0]
	l.prev[s], l.next[s] = 0, first
	l.prev[first] = s
	l.next[0] = s
}

var guest = newLRU()

//go:wasmexport kvmesh_abi_version
func abiVersion() int32 { return sdk.ABIVersion }

//go:wasmexport kvmesh_buffer
func buffer(records int32) int32 { return sdk.Buffer(records) }

//go:wasmexport kvmesh_observe
func observe(n int32) int32 { return sdk.HandleObserve(guest, n) }

//go:wasmexport kvmesh_victims
func victims(max int32) int32 { return sdk.HandleVictims(guest, max) }

func main() {}
