package replay

import "container/heap"

// Belady replays trace with Belady's offline optimum: when the cache is
// full it evicts the block whose next use is farthest away (a block never
// used again first, the block just written included). With the same lookup
// semantics as Run, capacityTokens/blockTokens blocks fit; for two tiers,
// pass their sum: the result bounds what any pair of policies can reach.
func Belady(trace []Request, capacityTokens int64, blockTokens int) Result {
	bt := Config{BlockTokens: blockTokens}.blockTokens()
	capacity := int(capacityTokens / bt)
	const never = int64(1) << 62

	// next[k] is the position in the flattened trace of the next request
	// for the block at position k.
	total := 0
	for i := range trace {
		total += len(trace[i].HashIDs)
	}
	next := make([]int64, total)
	last := make(map[uint64]int64, total/2)
	for i, k := len(trace)-1, total-1; i >= 0; i-- {
		ids := trace[i].HashIDs
		for j := len(ids) - 1; j >= 0; j, k = j-1, k-1 {
			if p, ok := last[ids[j]]; ok {
				next[k] = p
			} else {
				next[k] = never
			}
			last[ids[j]] = int64(k)
		}
	}

	var res Result
	cached := make(map[uint64]*farthest, capacity)
	q := &farthestFirst{}
	k := 0
	for i := range trace {
		ids := trace[i].HashIDs
		res.Requests++
		res.Blocks += int64(len(ids))
		prefix := true
		for _, id := range ids {
			_, ok := cached[id]
			prefix = prefix && ok
			if prefix {
				res.Hits++
				res.MemoryHits++
			}
		}
		for _, id := range ids {
			if b, ok := cached[id]; ok {
				b.next = next[k]
				heap.Fix(q, b.index)
			} else {
				b := &farthest{id: id, next: next[k]}
				heap.Push(q, b)
				cached[id] = b
				for len(cached) > capacity {
					delete(cached, heap.Pop(q).(*farthest).id)
				}
			}
			k++
		}
	}
	return res
}

type farthest struct {
	id    uint64
	next  int64
	index int
}

// farthestFirst is a max-heap on next use.
type farthestFirst []*farthest

func (h farthestFirst) Len() int           { return len(h) }
func (h farthestFirst) Less(i, j int) bool { return h[i].next > h[j].next }
func (h farthestFirst) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *farthestFirst) Push(x any) {
	b := x.(*farthest)
	b.index = len(*h)
	*h = append(*h, b)
}
func (h *farthestFirst) Pop() any {
	old := *h
	b := old[len(old)-1]
	*h = old[:len(old)-1]
	return b
}
