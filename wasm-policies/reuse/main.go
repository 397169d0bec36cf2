// Command reuse is an eviction policy that predicts reuse online and
// evicts the block least worth its room: the leaf of the cached prefix
// trees with the lowest learned Gittins index (hit density over the best
// horizon), in the manner of Least Hit Density (Beckmann et al., NSDI'18)
// with the ghost-trained reuse model of Learning Relaxed Belady (Song et
// al., NSDI'20) reduced to counting.
//
// The unit of reuse in an inference cluster is a conversation's chain: a
// later turn resends the whole previous prompt, so it reuses every full
// block of the previous request at once, and the partial last block almost
// never (the next turn extends it, so its hash changes). Each access starts
// a lifetime of the block in a class: whether it is a partial last block,
// how many blocks of its request were new, and how often the block itself
// has been used (a system prompt is used all the time, a conversation's
// prefix once per turn). Richer classes (turn count, time since the
// previous turn, request length, prefix hit) were tried on the Mooncake
// conversation trace: they split the counts too thin and did worse.
//
// Per class and age (log-spaced buckets) the policy counts lifetimes that
// ended in a reuse and lifetimes forgotten without one. A block the tier
// drops stays tracked as a ghost for a while, so a reuse after eviction
// still counts (the replay lab, and any store that keeps ids stable, report
// it as a miss or a new insert of the same id): the model learns what
// keeping a block longer would have earned, not only what the cache
// happened to keep. Until an evicted id has come back (ids may not be
// stable), an eviction ends the lifetime instead, as in LHD.
//
// From the counts, each class and age gets an index: the best ratio, over
// every horizon, of the reuses still to come within it to the cache time
// (block-ms) that the lifetimes still alive would spend until then,
// blended with the all-class curve so that sparse classes start sane. Reuse
// gaps are often longer than the tier holds traffic for, and few come in a
// conversation's first seconds: a block that has just arrived is worth
// less than one of its class that has waited most of the typical gap
// already, so a small tier keeps a stable subset of conversations long
// enough for their next turn rather than every conversation too briefly.
//
// Victims are chosen among the leaves of the cached prefix trees: evicting
// a block whose descendants stay would strand them, since a lookup stops at
// the first missing block. Among sampled leaves the one with the lowest
// index goes; its parent, once childless, joins the candidates, so a chain
// is cut back from its tail.
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

	// Class features (see onlineClass): partial, new blocks in the request
	// (0, 1-2, 3-7, 8-31, 32+), uses of the block (1, 2, 3-4, 5+).
	freshClasses = 5
	useClasses   = 4
	classes      = 2 * freshClasses * useClasses

	// Every time the tier has seen about its size in accesses (and at
	// least minRecompute), the indexes are rebuilt from the counts, which
	// then decay so the model follows the workload.
	minRecompute = 1024
	decay        = 0.95
	// priorSamples is how many lifetimes' worth of the all-class curve a
	// class's own counts are blended with.
	priorSamples = 8
	// minReuses is how many reuses the model must have seen before its
	// indexes replace LRU order.
	minReuses = 64
	// ghostsPerBlock bounds the ghosts to this many per cached block (as
	// if at least 64 were cached); maxTracked bounds blocks and ghosts
	// together (memory: about 80 bytes each with the id table; ghosts go
	// first, cached blocks are always tracked).
	ghostsPerBlock = 8
	maxTracked     = 1 << 19
	samples        = 48
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

// bucketFrac is how far into its bucket an age is, from 0 to 1.
func bucketFrac(ageMs int64) float32 {
	x := uint64(1 + max(ageMs, 0)/ageUnitMs)
	octave := bits.Len64(x) - 1
	if octave < 2 {
		return 0
	}
	span := uint64(1) << (octave - 2)
	return (float32(x&(span-1)) + float32(max(ageMs, 0)%ageUnitMs)/ageUnitMs) / float32(span)
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

// block is a cached block or a ghost.
type block struct {
	id      uint64
	parent  uint64
	last    int64  // ms of its last use
	class   uint16 // of its current lifetime
	uses    uint16 // saturating
	partial bool
	cached  bool
	linked  bool   // counted in its parent's children
	ended   bool   // its lifetime was counted as ended when it was evicted
	linkGen uint32 // the parent's gen when it was counted
	gen     uint32 // times it left the cache: tells a ghost entry current from stale
	// cached children; leaf: index into leaves, -1 when not a cached leaf
	children int32
	leaf     int32
	picked   uint32 // the Victims call that last looked at it
}

// ghost is an entry of the ghost FIFO.
type ghost struct {
	index int32
	gen   uint32
}

// request is what is known of the request whose lookup is being seen:
// consecutive events of one time, each the child of the one before.
type request struct {
	time    int64
	lastID  uint64
	members []int32 // blocks whose lifetime it started
	fresh   int     // blocks never seen before
}

type reusePolicy struct {
	at      *sdk.IDTable // id -> index into blocks (cached blocks and ghosts)
	blocks  []block
	free    []int32
	leaves  []int32
	ghosts  []ghost // oldest first from head
	head    int
	cached  int
	now     int64 // ms
	maxTok  uint32
	req     request
	stable  bool // an evicted id has come back: ghosts teach
	pending int  // accesses since the last recompute

	// reuse and ended count lifetimes by class and age; index is built
	// from them, once trained.
	reuse, ended [classes][ageBuckets]float64
	index        [classes][ageBuckets]float32
	trained      bool

	// classOf classes lifetimes; a report swaps in hinted classes to
	// measure what better prediction would earn.
	classOf func(b *block, r *request) int

	rng   uint64
	pick  uint32
	cands candidates
	taken []int32
}

func newPolicy() *reusePolicy {
	return &reusePolicy{at: sdk.NewIDTable(1 << 12), classOf: onlineClass, rng: 0x9E3779B97F4A7C15}
}

func bucket(n int, edges ...int) int {
	for i, e := range edges {
		if n <= e {
			return i
		}
	}
	return len(edges)
}

// onlineClass is the class of a lifetime of b started by request r, from
// what is known online.
func onlineClass(b *block, r *request) int {
	c := bucket(r.fresh, 0, 2, 7, 31)*useClasses + bucket(int(b.uses), 1, 2, 4)
	if b.partial {
		c += classes / 2
	}
	return c
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
			p.finish()
			if i, ok := p.at.Get(e.ID); ok && p.blocks[i].cached {
				p.uncache(i)
			}
		}
	}
}

func (p *reusePolicy) access(e *sdk.Event) {
	i, known := p.at.Get(e.ID)
	if e.Tokens > 0 {
		p.maxTok = max(p.maxTok, e.Tokens)
	}
	if known && p.blocks[i].last == p.now && p.blocks[i].uses > 0 && (e.Kind == sdk.Insert || p.blocks[i].cached) {
		// The insert that follows a lookup's miss, or a block seen twice
		// in one instant: the same use.
		if e.Kind == sdk.Insert && !p.blocks[i].cached {
			p.cache(i, e)
		}
		return
	}
	if e.Kind == sdk.Hit && !(known && p.blocks[i].cached) {
		return // a hit on a block the tier does not hold: out of step
	}
	if !(e.Time == p.req.time && e.Parent != 0 && e.Parent == p.req.lastID) {
		p.finish()
		p.req.time = e.Time
	}
	p.req.lastID = e.ID
	if !known {
		i = p.alloc(e.ID)
		p.req.fresh++
	} else {
		b := &p.blocks[i]
		if !b.cached && b.gen > 0 {
			p.stable = true // an evicted block came back: ids outlive eviction
		}
		if b.uses > 0 {
			p.learn(i, true)
		}
	}
	b := &p.blocks[i]
	if b.uses < 0xFFFF {
		b.uses++
	}
	b.last, b.ended = p.now, false
	b.partial = e.Tokens > 0 && e.Tokens < p.maxTok
	p.req.members = append(p.req.members, i)
	if e.Kind == sdk.Insert && !b.cached {
		p.cache(i, e)
	}
	if p.pending++; p.pending >= max(minRecompute, p.cached) {
		p.pending = 0
		p.recompute()
	}
}

// finish classes the lifetimes the request in hand started, now that its
// lookup is over.
func (p *reusePolicy) finish() {
	r := &p.req
	for _, i := range r.members {
		p.blocks[i].class = uint16(p.classOf(&p.blocks[i], r))
	}
	*r = request{members: r.members[:0], time: r.time}
}

// learn ends block i's lifetime: with a reuse, or without one.
func (p *reusePolicy) learn(i int32, reused bool) {
	b := &p.blocks[i]
	a := ageBucket(p.now - b.last)
	if reused {
		p.reuse[b.class][a]++
	} else {
		p.ended[b.class][a]++
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
	// Not cached yet: a ghost until its insert.
	p.ghosts = append(p.ghosts, ghost{i, 0})
	p.expireGhosts()
	return i
}

func (p *reusePolicy) cache(i int32, e *sdk.Event) {
	b := &p.blocks[i]
	b.cached, b.parent, b.linked = true, e.Parent, false
	if e.Tokens > 0 {
		b.partial = e.Tokens < p.maxTok
	}
	p.cached++
	if pi, ok := p.at.Get(b.parent); ok && p.blocks[pi].cached && pi != i {
		pb := &p.blocks[pi]
		if pb.children == 0 && pb.leaf >= 0 {
			p.dropLeaf(pi)
		}
		pb.children++
		b.linked, b.linkGen = true, pb.gen
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
	if b.linked {
		if pi, ok := p.at.Get(b.parent); ok && p.blocks[pi].cached && p.blocks[pi].gen == b.linkGen {
			pb := &p.blocks[pi]
			if pb.children--; pb.children == 0 {
				p.addLeaf(pi)
			}
		}
		b.linked = false
	}
	b.children = 0
	b.gen++
	if !p.stable {
		// Nothing evicted has come back yet: ids may not outlive
		// eviction, so the lifetime ends here.
		p.learn(i, false)
		b.ended = true
	}
	p.ghosts = append(p.ghosts, ghost{i, b.gen})
	p.expireGhosts()
}

// expireGhosts forgets the oldest ghosts beyond the bounds; a ghost that
// was never reused ends its lifetime without one at its age then.
func (p *reusePolicy) expireGhosts() {
	for len(p.ghosts)-p.head > ghostsPerBlock*max(p.cached, 64) || (len(p.blocks)-len(p.free) > maxTracked && p.head < len(p.ghosts)) {
		g := p.ghosts[p.head]
		if p.inRequest(g.index) {
			break // its request's lookup is not over: it goes later
		}
		p.head++
		if b := &p.blocks[g.index]; b.gen == g.gen && !b.cached && b.id != 0 {
			if b.uses > 0 && !b.ended {
				p.learn(g.index, false)
			}
			p.at.Delete(b.id)
			*b = block{leaf: -1}
			p.free = append(p.free, g.index)
		}
	}
	if p.head > len(p.ghosts)/2 {
		n := copy(p.ghosts, p.ghosts[p.head:])
		p.ghosts, p.head = p.ghosts[:n], 0
	}
}

// inRequest says whether block i was used by the request in hand (whose
// members must stay valid until it is finished).
func (p *reusePolicy) inRequest(i int32) bool {
	return p.blocks[i].last == p.now && len(p.req.members) > 0
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

// recompute rebuilds the indexes: for a class at age a, the best ratio
// over horizons h >= a of the reuses at ages a..h to the block-ms that the
// lifetimes alive at a spend up to h, each class's counts blended with
// priorSamples lifetimes of the all-class curve.
func (p *reusePolicy) recompute() {
	var allReuse, allEnded [ageBuckets]float64
	allAlive, reuses := 0.0, 0.0
	for c := range classes {
		for a := range ageBuckets {
			allReuse[a] += p.reuse[c][a]
			allEnded[a] += p.ended[c][a]
			allAlive += p.reuse[c][a] + p.ended[c][a]
			reuses += p.reuse[c][a]
		}
	}
	if !p.trained && reuses < minReuses {
		return // too little seen yet: LRU order stays
	}
	p.trained = true
	scale := priorSamples / allAlive
	var hits, occ [ageBuckets]float64
	for c := range classes {
		alive := 0.0
		for a := ageBuckets - 1; a >= 0; a-- {
			r := p.reuse[c][a] + scale*allReuse[a]
			n := r + p.ended[c][a] + scale*allEnded[a]
			hits[a] = r
			occ[a] = (alive + n/2) * bucketWidth(a)
			alive += n
			p.reuse[c][a] *= decay
			p.ended[c][a] *= decay
		}
		for a := range ageBuckets {
			best, h, o := 0.0, 0.0, 0.0
			for k := a; k < ageBuckets; k++ {
				h += hits[k]
				o += occ[k]
				if o > 0 && h > best*o {
					best = h / o
				}
			}
			p.index[c][a] = float32(best)
		}
	}
}

func (p *reusePolicy) random() uint64 {
	p.rng ^= p.rng << 13
	p.rng ^= p.rng >> 7
	p.rng ^= p.rng << 17
	return p.rng
}

// worth is the index of cached block i now, interpolated between age
// buckets so that, within a class, ties go to the older block.
func (p *reusePolicy) worth(i int32) float32 {
	b := &p.blocks[i]
	age := p.now - b.last
	if !p.trained {
		// Until the model has seen reuses: LRU, partial blocks first.
		x := 1 / float32(1+age)
		if b.partial {
			x /= 1e6
		}
		return x
	}
	row := &p.index[b.class]
	a := ageBucket(age)
	if a+1 == ageBuckets {
		return row[a]
	}
	f := bucketFrac(age)
	return row[a]*(1-f) + row[a+1]*f
}

// Victims samples leaves (samples, and two more per victim asked for)
// and names them lowest index first. Naming a leaf takes it out of the
// tree for the rest of the call, so its parent, once it has no other
// cached child, joins the candidates: a dead chain goes block by block
// from its tail rather than many chains losing one block each. The tree is
// restored before returning; the store's Remove events do the real work.
func (p *reusePolicy) Victims(dst []uint64, max int) []uint64 {
	p.finish()
	if max <= 0 || p.cached == 0 {
		return dst
	}
	p.pick++
	h := p.cands[:0]
	if len(p.leaves) > 0 {
		for range samples + 2*max {
			i := p.leaves[p.random()%uint64(len(p.leaves))]
			if p.blocks[i].picked != p.pick {
				p.blocks[i].picked = p.pick
				h = append(h, candidate{i, p.worth(i)})
			}
		}
	}
	h.init()
	taken := p.taken[:0]
	next := 0 // leaves not sampled, in order, once the sample runs dry
	for len(taken) < max {
		if len(h) == 0 {
			for next < len(p.leaves) && p.blocks[p.leaves[next]].picked == p.pick {
				next++
			}
			if next == len(p.leaves) {
				break
			}
			i := p.leaves[next]
			p.blocks[i].picked = p.pick
			h.push(candidate{i, p.worth(i)})
		}
		i := h.pop().index
		taken = append(taken, i)
		dst = append(dst, p.blocks[i].id)
		b := &p.blocks[i]
		if !b.linked {
			continue
		}
		if pi, ok := p.at.Get(b.parent); ok && p.blocks[pi].cached && p.blocks[pi].gen == b.linkGen {
			if p.blocks[pi].children--; p.blocks[pi].children == 0 && p.blocks[pi].picked != p.pick {
				p.blocks[pi].picked = p.pick
				h.push(candidate{pi, p.worth(pi)})
			}
		}
	}
	for _, i := range taken {
		if b := &p.blocks[i]; b.linked {
			if pi, ok := p.at.Get(b.parent); ok && p.blocks[pi].cached && p.blocks[pi].gen == b.linkGen {
				p.blocks[pi].children++
			}
		}
	}
	// Cached blocks no leaf leads to (a cycle of parent ids): any will do.
	for i := range p.blocks {
		if len(taken) >= max || len(taken) >= p.cached {
			break
		}
		if b := &p.blocks[i]; b.cached && b.picked != p.pick {
			b.picked = p.pick
			taken = append(taken, int32(i))
			dst = append(dst, b.id)
		}
	}
	p.cands, p.taken = h, taken
	return dst
}

type candidate struct {
	index int32
	worth float32
}

// candidates is a min-heap on worth.
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
		if s[parent].worth <= s[i].worth {
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
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].worth < h[least].worth {
			least = l
		}
		if r < len(h) && h[r].worth < h[least].worth {
			least = r
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
