// Command lru is the least-recently-used eviction policy as a wasm module:
// the same victims, in the same order, as the agent's native LRU. It is the
// reference for what the ABI costs (kvmesh bench policy) and the simplest
// example of an eviction policy.
package main

import (
	"unsafe"

	"github.com/kvmesh/kvmesh/wasm-policies/sdk"
)

// lru threads a circular doubly linked list through a slice of nodes, with
// node 0 as the sentinel (its next is the most recently used block, its
// prev the least), and finds a block's node through an open-addressing
// table of its own, kept at most a quarter full so that nearly every
// lookup ends at its first probe. The code is written for Go's wasm port,
// where every taken branch is a jump through the function's dispatch loop
// and a fuel check, and a call is dearer still: the hot path calls
// nothing, the sentinel makes linking and unlinking branch-free, a removal
// reuses the position its lookup found, and freed nodes are threaded
// through next instead of kept in a slice. Indexes are in range by
// construction (table positions are masked, nodes come from the table), so
// elements are reached without bounds checks. This is about twice as fast
// in a guest as the same list over sdk.IDTable and separate slices.
type lru struct {
	nodes []node   // node 0 is the sentinel
	free  int32    // first free node, threaded through next; 0 if none
	keys  []uint64 // table position -> block id, 0 if empty
	vals  []int32  // table position -> node
	mask  uint64
	n     int // ids in the table
}

type node struct {
	id         uint64
	prev, next int32
}

func newLRU() *lru {
	l := &lru{nodes: make([]node, 1, 1<<12)}
	l.alloc(1 << 14)
	return l
}

func (l *lru) alloc(size int) {
	l.keys, l.vals, l.mask = make([]uint64, size), make([]int32, size), uint64(size-1)
}

func (l *lru) key(i uint64) *uint64 {
	return (*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(l.keys)), uintptr(i)*unsafe.Sizeof(uint64(0))))
}

func (l *lru) val(i uint64) *int32 {
	return (*int32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(l.vals)), uintptr(i)*unsafe.Sizeof(int32(0))))
}

func (l *lru) node(s int32) *node {
	return (*node)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(l.nodes)), uintptr(s)*unsafe.Sizeof(node{})))
}

func (l *lru) home(id uint64) uint64 {
	// Fibonacci hashing spreads the store's sequential ids over the table.
	return (id * 0x9E3779B97F4A7C15) >> 32 & l.mask
}

// find returns the position of id, or of the empty entry where it would go.
func (l *lru) find(id uint64) uint64 {
	i := l.home(id)
	for k := *l.key(i); k != id && k != 0; k = *l.key(i) {
		i = (i + 1) & l.mask
	}
	return i
}

func (l *lru) Observe(events []sdk.Event) {
	for i := range events {
		e := &events[i]
		switch k := e.Kind; {
		case k-sdk.Insert < 2: // insert or hit
			if e.ID == 0 {
				continue
			}
			p := l.find(e.ID)
			var s int32
			if *l.key(p) == e.ID {
				s = *l.val(p)
				l.unlink(s)
			} else if k == sdk.Insert {
				s = l.insert(e.ID, p)
			} else {
				continue
			}
			// push front
			first := l.node(0).next
			n := l.node(s)
			n.prev, n.next = 0, first
			l.node(first).prev = s
			l.node(0).next = s
		case k-sdk.Remove < 2: // remove or demote
			if e.ID == 0 {
				continue
			}
			p := l.find(e.ID)
			if *l.key(p) != e.ID {
				continue
			}
			s := *l.val(p)
			l.unlink(s)
			l.node(s).next = l.free
			l.free = s
			l.delete(p)
		}
	}
}

func (l *lru) unlink(s int32) {
	n := l.node(s)
	p, x := n.prev, n.next
	l.node(p).next = x
	l.node(x).prev = p
}

// insert gives id a node and enters it at table position p, where find
// left it.
func (l *lru) insert(id uint64, p uint64) int32 {
	s := l.free
	if s != 0 {
		l.free = l.node(s).next
		l.node(s).id = id
	} else {
		s = int32(len(l.nodes))
		l.nodes = append(l.nodes, node{id: id})
	}
	*l.key(p), *l.val(p) = id, s
	if l.n++; 4*l.n > len(l.keys) {
		l.grow()
	}
	return s
}

// delete empties table position p. Backward-shift deletion keeps every
// probe chain unbroken without tombstones.
func (l *lru) delete(i uint64) {
	for j := (i + 1) & l.mask; *l.key(j) != 0; j = (j + 1) & l.mask {
		if h := l.home(*l.key(j)); (j-h)&l.mask >= (j-i)&l.mask {
			*l.key(i), *l.val(i) = *l.key(j), *l.val(j)
			i = j
		}
	}
	*l.key(i) = 0
	l.n--
}

func (l *lru) grow() {
	keys, vals := l.keys, l.vals
	l.alloc(2 * len(keys))
	for i, k := range keys {
		if k != 0 {
			p := l.find(k)
			*l.key(p), *l.val(p) = k, vals[i]
		}
	}
}

func (l *lru) Victims(dst []uint64, max int) []uint64 {
	for s := l.nodes[0].prev; s != 0 && max > 0; s = l.node(s).prev {
		dst = append(dst, l.node(s).id)
		max--
	}
	return dst
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
