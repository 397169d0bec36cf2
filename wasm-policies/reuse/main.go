// Command reuse is an eviction policy that predicts reuse online and
// evicts the block expected to earn the fewest hits per unit of cache time
// it would occupy, in the manner of Least Hit Density (Beckmann et al.,
// NSDI'18) with the learned reuse model of Learning Relaxed Belady (Song et
// al., NSDI'20) reduced to counting.
//
// Every block's current lifetime falls in a class (how often the block was
// used before, how much of its request was new, how long ago its chain was
// last used, whether it is a partial last block). Per class and age the
// policy counts reuses and lifetimes that ended without one. A block the
// tier drops is remembered as a ghost, so a reuse that comes after eviction
// still teaches the model (the store reports it as a miss or a new insert
// of the same id): the model learns what keeping a block longer would have
// earned, not only what the cache happened to see.
//
// Victims are chosen among the leaves of the cached prefix trees: evicting
// a block whose descendants stay would strand them, since a lookup stops at
// the first missing block. Among 64 sampled leaves the one with the lowest
// hit density goes.
package main

import (
	"math/bits"

	"github.com/kvmesh/kvmesh/wasm-policies/sdk"
)

const (
	ageBuckets = 64
	// Ages are bucketed logarithmically from a quarter second: reuse
	// happens on every time scale from seconds to hours.
	ageUnitMs = 250
	// classes: accesses (5) x new blocks in the request (5) x time since
	// the chain's last use (4) x partial block (2).
	classes = 5 * 5 * 4 * 2
	// Every time the cache has seen about twice its size in accesses (and
	// at least minRecompute), the densities are rebuilt from the counts,
	// which then decay so the model follows the workload.
	minRecompute = 1024
	decay        = 0.95
	// priorSamples is how many lifetimes' worth of the all-class average a
	// class's own counts are blended with, so sparse classes start sane.
	priorSamples = 8
	// ghostsPerBlock bounds the ghosts to this many per cached block.
	ghostsPerBlock = 4
	samples        = 32
)

// ageBucket is floor(4·log2(1 + age/ageUnitMs)), in integer arithmetic:
// the octave from the leading bit, the quarter from the two bits below it
// (a piecewise-linear log, close enough to place an age).
func ageBucket(ageMs int64) int {
	x := uint64(1 + max(ageMs, 0)/ageUnitMs)
	octave := bits.Len64(x) - 1
	quarter := 0
	if octave >= 2 {
		quarter = int(x>>(octave-2)) & 3
	} else {
		quarter = int(x<<(2-octave)) & 3
	}
	return min(4*octave+quarter, ageBuckets-1)
}

// bucketWidth is the span of ages, in ms, that ageBucket maps to b. The
// first two octaves hold too few whole units to fill four buckets: the
// others there are empty.
func bucketWidth(b int) float64 {
	octave, quarter := b/4, b%4
	switch {
	case octave >= 2:
		return ageUnitMs * float64(uint64(1)<<(octave-2))
	case octave == 1 && quarter%2 == 0, octave == 0 && quarter == 0:
		return ageUnitMs
	}
	return 0
}

// request gathers what is known of the request a block was last used by.
type request struct {
	time    int64
	fresh   int   // blocks of the request never seen before
	prevGap int64 // ms since the chain's previous use; -1 if none
	refs    int   // blocks whose current lifetime belongs to it
}

// ghost is an entry of the ghost FIFO; it is stale if its block has been
// cached again since.
type ghost struct {
	index   int32
	evicted int32
}

// block is a cached block or a ghost.
type block struct {
	id       uint64
	parent   uint64
	last     int64 // ms of its last use
	uses     int32
	req      int32  // index into reqs
	children int32  // cached children
	leaf     int32  // index into leaves; -1 when not a cached leaf
	picked   uint32 // the Victims call that last sampled it
	evicted  int32  // times it left the cache: tells a ghost entry current from stale
	partial  bool
	cached   bool
}

type reusePolicy struct {
	at       *sdk.IDTable // id -> index into blocks (cached blocks and ghosts)
	blocks   []block
	free     []int32
	leaves   []int32
	ghosts   []ghost // oldest first from head
	head     int
	cached   int
	reqs     []request
	freeReqs []int32
	cur      map[uint64]int32 // block id -> request of the current timestamp
	curTime  int64
	now      int64 // ms
	maxTok   uint32
	accesses int

	reuse, ended, densities [classes][ageBuckets]float64
	rng                     uint64
	pick                    uint32 // Victims calls so far
	cands                   []candidate
}

type candidate struct {
	index   int32
	density float64
}

func newPolicy() *reusePolicy {
	p := &reusePolicy{at: sdk.NewIDTable(1 << 12), cur: map[uint64]int32{}, rng: 0x9E3779B97F4A7C15}
	// Until the first counts arrive, younger is better: plain LRU.
	for c := range p.densities {
		for a := range p.densities[c] {
			p.densities[c][a] = 1 / float64(a+1)
		}
	}
	return p
}

func bucket(n int, edges ...int) int {
	for i, e := range edges {
		if n <= e {
			return i
		}
	}
	return len(edges)
}

func (p *reusePolicy) class(b *block) int {
	r := &p.reqs[b.req]
	c := bucket(int(b.uses)-1, 0, 1, 2, 5)
	c = c*5 + bucket(r.fresh, 1, 3, 7, 31)
	gap := 0
	if r.prevGap >= 0 {
		gap = 1 + bucket(int(r.prevGap/1000), 60, 240)
	}
	c = c*4 + gap
	if b.partial {
		c += classes / 2
	}
	return c
}

// requestOf returns the request an event belongs to: events of one
// timestamp chained by parent ids are one request.
func (p *reusePolicy) requestOf(e *sdk.Event) int32 {
	if e.Time != p.curTime {
		p.curTime = e.Time
		clear(p.cur)
	}
	r, ok := p.cur[e.Parent]
	if !ok || e.Parent == 0 {
		if n := len(p.freeReqs); n > 0 {
			r = p.freeReqs[n-1]
			p.freeReqs = p.freeReqs[:n-1]
		} else {
			r = int32(len(p.reqs))
			p.reqs = append(p.reqs, request{})
		}
		p.reqs[r] = request{time: e.Time, prevGap: -1}
	}
	p.cur[e.ID] = r
	return r
}

func (p *reusePolicy) release(r int32) {
	if p.reqs[r].refs--; p.reqs[r].refs == 0 {
		p.freeReqs = append(p.freeReqs, r)
	}
}

// use starts a new lifetime for block i, ending the previous one as a
// reuse.
func (p *reusePolicy) use(i int32, r int32) {
	b := &p.blocks[i]
	if b.uses > 0 {
		age := p.now - b.last
		p.reuse[p.class(b)][ageBucket(age)]++
		if g := p.reqs[r].prevGap; g < 0 || age < g {
			p.reqs[r].prevGap = age
		}
		p.release(b.req)
	}
	b.uses++
	b.last = p.now
	b.req = r
	p.reqs[r].refs++
	if p.accesses++; p.accesses >= max(minRecompute, 2*p.cached) {
		p.accesses = 0
		p.recompute()
	}
}

func (p *reusePolicy) Observe(events []sdk.Event) {
	for k := range events {
		e := &events[k]
		p.now = max(p.now, e.Time/1e6)
		if e.ID == 0 {
			continue
		}
		switch e.Kind {
		case sdk.Hit, sdk.Miss, sdk.Insert:
			p.access(e)
		case sdk.Remove, sdk.Demote:
			if i, ok := p.at.Get(e.ID); ok && p.blocks[i].cached {
				p.uncache(i)
			}
		}
	}
}

func (p *reusePolicy) access(e *sdk.Event) {
	i, known := p.at.Get(e.ID)
	cached := known && p.blocks[i].cached
	switch e.Kind {
	case sdk.Hit:
		if !cached {
			return
		}
	case sdk.Miss:
		if !known {
			return // nothing to learn about a block never seen
		}
	case sdk.Insert:
		p.maxTok = max(p.maxTok, e.Tokens)
		// The insert that follows a lookup's miss is the same use.
		if known && !cached && p.blocks[i].last == p.now {
			p.cache(i, e)
			return
		}
	}
	r := p.requestOf(e)
	if !known {
		i = p.alloc(e.ID)
		p.reqs[r].fresh++
	}
	p.use(i, r)
	if e.Kind == sdk.Insert && !p.blocks[i].cached {
		p.cache(i, e)
	}
}

func (p *reusePolicy) alloc(id uint64) int32 {
	var i int32
	if n := len(p.free); n > 0 {
		i = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		i = int32(len(p.blocks))
		p.blocks = append(p.blocks, block{})
	}
	p.blocks[i] = block{id: id, leaf: -1}
	p.at.Put(id, i)
	return i
}

func (p *reusePolicy) cache(i int32, e *sdk.Event) {
	b := &p.blocks[i]
	b.cached, b.parent, b.partial = true, e.Parent, e.Tokens < p.maxTok
	p.cached++
	if pi, ok := p.at.Get(b.parent); ok && p.blocks[pi].cached {
		if p.blocks[pi].children == 0 {
			p.dropLeaf(pi)
		}
		p.blocks[pi].children++
	}
	if b.children == 0 {
		p.addLeaf(i)
	}
}

func (p *reusePolicy) uncache(i int32) {
	b := &p.blocks[i]
	b.cached = false
	p.cached--
	if b.leaf >= 0 {
		p.dropLeaf(i)
	}
	if pi, ok := p.at.Get(b.parent); ok && p.blocks[pi].cached {
		if p.blocks[pi].children--; p.blocks[pi].children == 0 {
			p.addLeaf(pi)
		}
	}
	b.children = 0
	b.evicted++
	p.ghosts = append(p.ghosts, ghost{i, b.evicted})
	p.expireGhosts()
}

// expireGhosts forgets the oldest ghosts beyond the bound; a ghost that
// was never reused ends its lifetime without a hit at its age then.
func (p *reusePolicy) expireGhosts() {
	for len(p.ghosts)-p.head > ghostsPerBlock*max(p.cached, 1) {
		g := p.ghosts[p.head]
		p.head++
		if b := &p.blocks[g.index]; b.evicted == g.evicted && !b.cached {
			p.ended[p.class(b)][ageBucket(p.now-b.last)]++
			p.release(b.req)
			p.at.Delete(b.id)
			*b = block{}
			p.free = append(p.free, g.index)
		}
	}
	if p.head > len(p.ghosts)/2 {
		n := copy(p.ghosts, p.ghosts[p.head:])
		p.ghosts, p.head = p.ghosts[:n], 0
	}
}

func (p *reusePolicy) addLeaf(i int32) {
	p.blocks[i].leaf = int32(len(p.leaves))
	p.leaves = append(p.leaves, i)
}

func (p *reusePolicy) dropLeaf(i int32) {
	at := p.blocks[i].leaf
	last := p.leaves[len(p.leaves)-1]
	p.leaves[at] = last
	p.blocks[last].leaf = at
	p.leaves = p.leaves[:len(p.leaves)-1]
	p.blocks[i].leaf = -1
}

// recompute rebuilds the hit densities: for a class at age a, the reuses
// still to come past a over the cache time (block-ms) that the lifetimes
// reaching a go on to spend, blended with the all-class average.
func (p *reusePolicy) recompute() {
	var allReuse, allEnded [ageBuckets]float64
	for c := range classes {
		for a := range ageBuckets {
			allReuse[a] += p.reuse[c][a]
			allEnded[a] += p.reuse[c][a] + p.ended[c][a]
		}
	}
	var prior, weight [ageBuckets]float64
	var hits, alive, time float64
	for a := ageBuckets - 1; a >= 0; a-- {
		hits += allReuse[a]
		alive += allEnded[a]
		time += alive * bucketWidth(a)
		if alive > 0 {
			prior[a] = hits / time
			weight[a] = priorSamples * time / alive
		}
	}
	for c := range classes {
		hits, alive, time = 0, 0, 0
		for a := ageBuckets - 1; a >= 0; a-- {
			hits += p.reuse[c][a]
			alive += p.reuse[c][a] + p.ended[c][a]
			time += alive * bucketWidth(a)
			if time+weight[a] > 0 {
				p.densities[c][a] = (hits + prior[a]*weight[a]) / (time + weight[a])
			} else {
				p.densities[c][a] = 0
			}
			p.reuse[c][a] *= decay
			p.ended[c][a] *= decay
		}
	}
}

func (p *reusePolicy) random() uint64 {
	p.rng ^= p.rng << 13
	p.rng ^= p.rng >> 7
	p.rng ^= p.rng << 17
	return p.rng
}

func (p *reusePolicy) density(i int32) float64 {
	b := &p.blocks[i]
	return p.densities[p.class(b)][ageBucket(p.now-b.last)]
}

// Victims samples leaves (samples, and two more per victim asked for)
// and names them lowest density first. Naming a leaf takes it out of the
// tree for the rest of the call, so its parent, once it has no other
// cached child, joins the candidates: a dead chain goes block by block
// from its tail rather than many chains losing one block each. The tree is
// restored before returning; the store's Remove events do the real work.
func (p *reusePolicy) Victims(dst []uint64, max int) []uint64 {
	if max <= 0 || len(p.leaves) == 0 {
		return dst
	}
	p.pick++
	h := candidates(p.cands[:0])
	for range samples + 2*max {
		i := p.leaves[p.random()%uint64(len(p.leaves))]
		if p.blocks[i].picked != p.pick {
			p.blocks[i].picked = p.pick
			h = append(h, candidate{i, p.density(i)})
		}
	}
	h.init()
	var taken []int32
	for len(taken) < max && len(h) > 0 {
		i := h.pop().index
		taken = append(taken, i)
		dst = append(dst, p.blocks[i].id)
		pi, ok := p.at.Get(p.blocks[i].parent)
		if !ok || !p.blocks[pi].cached {
			continue
		}
		if p.blocks[pi].children--; p.blocks[pi].children == 0 && p.blocks[pi].picked != p.pick {
			p.blocks[pi].picked = p.pick
			h.push(candidate{pi, p.density(pi)})
		}
	}
	for _, i := range taken {
		if pi, ok := p.at.Get(p.blocks[i].parent); ok && p.blocks[pi].cached {
			p.blocks[pi].children++
		}
	}
	p.cands = h
	return dst
}

// candidates is a min-heap on density.
type candidates []candidate

func (h candidates) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *candidates) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if s[parent].density <= s[i].density {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

func (h *candidates) pop() candidate {
	s := *h
	top := s[0]
	s[0] = s[len(s)-1]
	*h = s[:len(s)-1]
	h.down(0)
	return top
}

func (h candidates) down(i int) {
	for {
		least := i
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < len(h) && h[c].density < h[least].density {
				least = c
			}
		}
		if least == i {
			return
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}

var guest = newPolicy()

//go:wasmexport kvmesh_abi_version
func abiVersion() int32 { return sdk.ABIVersion }

//go:wasmexport kvmesh_buffer
func buffer(records int32) int32 { return sdk.Buffer(records) }

//go:wasmexport kvmesh_observe
func observe(n int32) int32 { return sdk.HandleObserve(guest, n) }

//go:wasmexport kvmesh_victims
func victims(max int32) int32 { return sdk.HandleVictims(guest, max) }

func main() {}
