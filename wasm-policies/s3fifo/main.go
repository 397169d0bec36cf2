// Command s3fifo is the S3-FIFO eviction policy (Yang et al., SOSP'23), a
// frequency-aware one: new blocks enter a small FIFO (a tenth of the
// tier); those used again before they reach its end move to the main
// FIFO, the others leave and are remembered as ghosts, and a ghost that is
// inserted again goes straight to main. Main evicts in FIFO order but
// gives a block one more round per use it got (up to three), so one-hit
// wonders go quickly and blocks in steady use stay.
package main

import "github.com/kvmesh/kvmesh/wasm-policies/sdk"

const (
	smallShare = 10 // percent of the tier the small FIFO holds
	maxFreq    = 3
)

const (
	inNone uint8 = iota
	inSmall
	inMain
)

// entry is a queue position; it is stale once its slot has moved or left
// (stamp changed).
type entry struct {
	slot  int32
	stamp uint32
}

type fifo struct {
	entries []entry
	head    int
}

func (q *fifo) push(e entry) { q.entries = append(q.entries, e) }

type s3fifo struct {
	at          *sdk.IDTable // id -> slot
	ids         []uint64
	freq, where []uint8
	stamp       []uint32
	free        []int32
	small, main fifo
	nSmall      int
	nMain       int
	ghosts      *sdk.IDTable // ids that left the small FIFO unused
	ghostOrder  []uint64
	ghostHead   int
}

func newS3FIFO() *s3fifo {
	return &s3fifo{at: sdk.NewIDTable(1 << 12), ghosts: sdk.NewIDTable(1 << 12)}
}

func (c *s3fifo) Observe(events []sdk.Event) {
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case sdk.Hit, sdk.Insert:
			if s, ok := c.at.Get(e.ID); ok {
				c.freq[s] = min(c.freq[s]+1, maxFreq)
			} else if e.Kind == sdk.Insert {
				c.insert(e.ID)
			}
		case sdk.Remove, sdk.Demote:
			if s, ok := c.at.Get(e.ID); ok {
				c.remove(s)
			}
		}
	}
	c.compact(&c.small)
	c.compact(&c.main)
}

func (c *s3fifo) insert(id uint64) {
	var s int32
	if n := len(c.free); n > 0 {
		s = c.free[n-1]
		c.free = c.free[:n-1]
		c.ids[s] = id
	} else {
		s = int32(len(c.ids))
		c.ids = append(c.ids, id)
		c.freq = append(c.freq, 0)
		c.where = append(c.where, inNone)
		c.stamp = append(c.stamp, 0)
	}
	c.at.Put(id, s)
	c.freq[s] = 0
	if _, ghost := c.ghosts.Get(id); ghost {
		c.ghosts.Delete(id)
		c.enqueue(s, inMain)
	} else {
		c.enqueue(s, inSmall)
	}
}

func (c *s3fifo) enqueue(s int32, where uint8) {
	c.stamp[s]++
	c.where[s] = where
	if where == inSmall {
		c.small.push(entry{s, c.stamp[s]})
		c.nSmall++
	} else {
		c.main.push(entry{s, c.stamp[s]})
		c.nMain++
	}
}

func (c *s3fifo) dequeue(s int32) {
	if c.where[s] == inSmall {
		c.nSmall--
	} else {
		c.nMain--
	}
	c.where[s] = inNone
	c.stamp[s]++
}

func (c *s3fifo) remove(s int32) {
	if c.where[s] == inSmall && c.freq[s] == 0 {
		c.remember(c.ids[s])
	}
	c.dequeue(s)
	c.at.Delete(c.ids[s])
	c.free = append(c.free, s)
}

// remember adds a ghost, forgetting the oldest beyond as many as the main
// FIFO holds.
func (c *s3fifo) remember(id uint64) {
	c.ghosts.Put(id, 1)
	c.ghostOrder = append(c.ghostOrder, id)
	for len(c.ghostOrder)-c.ghostHead > max(c.nMain, 1) {
		c.ghosts.Delete(c.ghostOrder[c.ghostHead])
		c.ghostHead++
	}
	if c.ghostHead > len(c.ghostOrder)/2 {
		n := copy(c.ghostOrder, c.ghostOrder[c.ghostHead:])
		c.ghostOrder, c.ghostHead = c.ghostOrder[:n], 0
	}
}

func (c *s3fifo) live(e entry) bool { return c.stamp[e.slot] == e.stamp }

// compact drops the stale entries at the head of q, and all of them once
// they are most of it.
func (c *s3fifo) compact(q *fifo) {
	for q.head < len(q.entries) && !c.live(q.entries[q.head]) {
		q.head++
	}
	if q.head > len(q.entries)/2 {
		n := copy(q.entries, q.entries[q.head:])
		q.entries, q.head = q.entries[:n], 0
	}
	if len(q.entries) > 2*(c.nSmall+c.nMain)+1024 {
		live := q.entries[:0]
		for _, e := range q.entries[q.head:] {
			if c.live(e) {
				live = append(live, e)
			}
		}
		q.entries, q.head = live, 0
	}
}

// Victims runs S3-FIFO's eviction scan: blocks used in the small FIFO move
// to main and blocks used in main go round again (both for good), while
// the blocks it would evict are named, in order, and stay until the store
// removes them.
func (c *s3fifo) Victims(dst []uint64, max int) []uint64 {
	small, main := c.small.head, c.main.head
	nSmall, nMain := c.nSmall, c.nMain
	for max > 0 && nSmall+nMain > 0 {
		if nSmall > 0 && (100*nSmall >= smallShare*(nSmall+nMain) || nMain == 0) {
			e := c.small.entries[small]
			small++
			if !c.live(e) {
				continue
			}
			if c.freq[e.slot] > 0 {
				c.freq[e.slot] = 0
				c.dequeue(e.slot)
				c.enqueue(e.slot, inMain)
				nMain++
			} else {
				dst = append(dst, c.ids[e.slot])
				max--
			}
			nSmall--
			continue
		}
		e := c.main.entries[main]
		main++
		if !c.live(e) {
			continue
		}
		if c.freq[e.slot] > 0 {
			c.freq[e.slot]--
			c.dequeue(e.slot)
			c.enqueue(e.slot, inMain)
			continue
		}
		dst = append(dst, c.ids[e.slot])
		max--
		nMain--
	}
	return dst
}

var guest = newS3FIFO()

//go:wasmexport kvmesh_abi_version
func abiVersion() int32 { return sdk.ABIVersion }

//go:wasmexport kvmesh_buffer
func buffer(records int32) int32 { return sdk.Buffer(records) }

//go:wasmexport kvmesh_observe
func observe(n int32) int32 { return sdk.HandleObserve(guest, n) }

//go:wasmexport kvmesh_victims
func victims(max int32) int32 { return sdk.HandleVictims(guest, max) }

func main() {}
