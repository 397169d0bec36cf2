// Command sighting is an admission policy that learns online which new
// blocks are worth a disk write, and writes back (on eviction from memory)
// only those.
//
// A disk write pays off only if the block is asked for again after memory
// has dropped it. In an inference cluster reuse comes a request at a time:
// a later turn of a conversation resends the previous prompt, reusing its
// full blocks, while the partial last block never comes back (the next turn
// extends it, so its hash changes). So the policy groups the new blocks of a
// request into a run (consecutive records, each the child of the one before,
// arriving together) and learns per class of block how often runs were
// reused that far. A block's class is: partial or not (fewer tokens than the
// largest block seen), how much chain precedes its run (the run's first
// chain position: a first turn follows only a shared system prompt, a late
// turn a long history) and, for a full block, its offset in the run, both in
// log-spaced steps.
//
// Reuse is seen in the admission records themselves. A new block whose
// parent is a block of an earlier run proves that run was read up to that
// parent (and the runs it continued, up to where it continued them); a
// block admitted again (its id seen before: it was asked for after leaving
// the store) proves the same of its own run, and is always written back:
// its second sighting earns it the disk. A run is folded into its classes'
// counts once it is old enough that its reuse, if any, has shown: twice
// the median time from a run's admission to its first reuse (learnt from
// the reuses seen, and only trusted once the policy has watched for twice
// as long, since longer gaps could not have shown before). Counts are
// halved now and then, so the model follows a changing workload.
//
// The decision spends a budget rather than applying a threshold: classes
// are skipped (memory only) in order of rising reuse rate as long as the
// reuses the skipped blocks had add up to at most half a percent of the
// blocks admitted, so a well-reused class is never skipped for being the
// least reused one left. A lookup stops at the first missing block, so
// skipping a block loses the reuses of the rest of its run as well: full
// blocks are skipped from an offset on, the tail of the run, and once a
// block of a run is skipped the rest of the run is too. A class seen in
// fewer than 32 runs keeps its default: full blocks written, partial blocks
// skipped.
//
// How much this saves depends on how well the classes tell reused blocks
// from the rest. On the Mooncake conversation trace they barely do (about
// a quarter of new full blocks come back, and whether a first turn gets a
// second is close to a coin flip whatever its records say), so with memory
// of 3M tokens and disk of 30M the policy writes about 17% fewer blocks
// than write-through for half a point of hit rate, most of it from the
// partial blocks and the tails of long continued requests; a perfect
// predictor of reuse would write a quarter as many.
package main

import (
	"math/bits"

	"github.com/kvmesh/kvmesh/wasm-policies/sdk"
)

const (
	// blockWindow is how many admitted blocks are remembered (for parents
	// and second sightings), runWindow how many runs: about 14 MB in all.
	blockWindow = 1 << 18
	runWindow   = 1 << 16

	offClasses = 8                                  // offset in the run: 0, 1, 2-3, 4-7, ..., 64+
	preClasses = 8                                  // first chain position of the run: 0, 1, 2-3, ..., 64+
	classes    = preClasses*offClasses + preClasses // full blocks, then partial ones

	// budget is the share of admitted blocks whose reuses the skipped
	// classes may have had: as admitted blocks are a part of those asked
	// for, under half a point of hit rate, half of what issue #3 allows,
	// the rest kept as a margin for the estimates' errors.
	budget = 0.005
	// minEvidence is the matured runs a class needs before it may be
	// skipped.
	minEvidence = 32
	// halveAt: the counts are halved when this many blocks have been
	// folded since the last halving.
	halveAt = 1 << 17
	// replanEvery is how many admissions pass between recomputing the
	// skipped classes.
	replanEvery = 512
	// maturity is how many median reuse gaps a run waits before it is
	// folded into the counts.
	maturity = 2
	// sameRequest is how close in time two records must be to belong to one
	// run: a request's blocks are stored together, a conversation's next
	// turn comes seconds later.
	sameRequest = int64(500e6) // ns
	// minGaps is how many reuse gaps must be seen before any run is
	// folded.
	minGaps = 64
	// foldPerCall bounds the runs folded per record, keeping every call
	// short.
	foldPerCall = 8
)

type block struct {
	id  uint64
	run uint32 // serial of its run
	off uint32 // offset in the run
}

type run struct {
	serial    uint32 // 0: free
	start     int64  // time of its first block
	last      int64  // time of its latest block
	tail      uint64 // id of its latest block
	n         uint32 // blocks
	extent    uint32 // blocks from the start proven reused
	cut       uint32 // offset of its first skipped block (n or more: none)
	pre       uint8  // class of its first chain position
	partial   bool   // its last block is partial
	parent    uint32 // serial of the run it continues, 0 if none
	parentOff uint32 // offset there of its parent block
}

type sighting struct {
	ids    *sdk.IDTable // block id -> index in blocks
	blocks []block      // ring, by admission order
	nextB  int
	runs   []run // ring, by serial
	serial uint32
	folded uint32 // runs up to this serial are folded

	maxTok uint32

	admitted  [classes]float64 // matured blocks per class
	reused    [classes]float64 // of those, proven reused
	runsIn    [classes]float64 // matured runs with blocks in each class
	sinceHalf float64
	skip      [classes]bool
	sinceRe   int

	gaps    [256]float64 // reuse gaps (ns), in quarter-octave steps
	gapN    float64
	horizon int64 // runs older than this are folded
	first   int64 // time of the first record
	started bool
}

func newSighting() *sighting {
	p := &sighting{ids: sdk.NewIDTable(blockWindow), blocks: make([]block, blockWindow), runs: make([]run, runWindow)}
	p.plan()
	return p
}

func (p *sighting) Admit(inserts []sdk.Event, dst []sdk.Decision) []sdk.Decision {
	for i := range inserts {
		dst = append(dst, sdk.Decision{Disk: p.admit(&inserts[i]), Ack: sdk.DurableMemory})
	}
	return dst
}

func (p *sighting) admit(e *sdk.Event) sdk.DiskWrite {
	p.maxTok = max(p.maxTok, e.Tokens)
	if !p.started {
		p.started, p.first = true, e.Time
	}
	p.fold(e.Time)
	if p.sinceRe++; p.sinceRe >= replanEvery {
		p.sinceRe = 0
		p.plan()
	}

	again := false
	if i, ok := p.ids.Get(e.ID); ok {
		// Admitted before and asked for again after it left the store.
		b := p.blocks[i]
		p.credit(b.run, b.off+1, e.Time)
		again = true
	}

	// Its run: the one its parent ends, if it arrived just now; otherwise a
	// new run, continuing the parent's run if the parent is known.
	var r *run
	if pi, ok := p.ids.Get(e.Parent); ok {
		pb := p.blocks[pi]
		pr := p.run(pb.run)
		if pr != nil && pr.tail == e.Parent && e.Time-pr.last <= sameRequest {
			r = pr
		} else {
			p.credit(pb.run, pb.off+1, e.Time)
			r = p.newRun(e, pb.run, pb.off)
		}
	} else {
		r = p.newRun(e, 0, 0)
	}
	off := r.n
	r.n++
	r.last, r.tail = e.Time, e.ID
	r.partial = e.Tokens > 0 && e.Tokens < p.maxTok
	p.remember(e.ID, r.serial, off)

	switch {
	case again:
		return sdk.DiskOnEvict
	case r.cut < off:
		return sdk.DiskNever // behind a skipped block
	case p.skip[class(r.partial, r.pre, off)]:
		r.cut = off
		return sdk.DiskNever
	}
	return sdk.DiskOnEvict
}

// run returns the run of a serial, or nil if it has been forgotten.
func (p *sighting) run(serial uint32) *run {
	if serial == 0 {
		return nil
	}
	r := &p.runs[serial%runWindow]
	if r.serial != serial {
		return nil
	}
	return r
}

func (p *sighting) newRun(e *sdk.Event, parent, parentOff uint32) *run {
	p.serial++
	r := &p.runs[p.serial%runWindow]
	if r.serial > p.folded {
		// The ring is full of unfolded runs: fold the oldest now.
		p.foldRun(r)
		p.folded = r.serial
	}
	*r = run{serial: p.serial, start: e.Time, last: e.Time, cut: ^uint32(0), pre: logClass(e.ChainPos, preClasses), parent: parent, parentOff: parentOff}
	return r
}

// remember records a block, forgetting the oldest if the window is full.
func (p *sighting) remember(id uint64, serial, off uint32) {
	b := &p.blocks[p.nextB]
	if b.id != 0 {
		if i, ok := p.ids.Get(b.id); ok && int(i) == p.nextB {
			p.ids.Delete(b.id)
		}
	}
	*b = block{id: id, run: serial, off: off}
	p.ids.Put(id, int32(p.nextB))
	p.nextB = (p.nextB + 1) % blockWindow
}

// credit records that a run was read up to extent blocks, and so were the
// runs it continues, up to where it continued them.
func (p *sighting) credit(serial, extent uint32, now int64) {
	for depth := 0; depth < 16; depth++ {
		r := p.run(serial)
		if r == nil || r.extent >= extent {
			return
		}
		if depth == 0 && r.extent == 0 {
			p.gap(now - r.start) // the time to a run's first reuse
		}
		r.extent = extent
		serial, extent = r.parent, r.parentOff+1
	}
}

// gap adds an observed reuse gap and updates the maturity horizon.
func (p *sighting) gap(d int64) {
	if d < 4 {
		return
	}
	// Quarter-octave steps: a step is 2^e·(1 + m/4) for m in 0..3.
	e := bits.Len64(uint64(d)) - 1
	m := int(d>>(e-2)) & 3
	p.gaps[4*e+m]++
	p.gapN++
	if p.gapN >= 1024 {
		for i := range p.gaps {
			p.gaps[i] /= 2
		}
		p.gapN /= 2
	}
	half, acc := p.gapN/2, 0.0
	for i, g := range p.gaps {
		if acc += g; acc >= half {
			// The upper end of the step holding the median.
			upper := int64(1)<<(i/4) + int64(i%4+1)<<(i/4)/4
			p.horizon = maturity * upper
			return
		}
	}
}

// fold adds the runs old enough to have shown their reuse to the counts.
func (p *sighting) fold(now int64) {
	if p.gapN < minGaps || now-p.first < 2*p.horizon {
		// Too few gaps seen, or seen for too short a time: the gaps longer
		// than the time watched so far have had no chance to show.
		return
	}
	for range foldPerCall {
		if p.folded == p.serial {
			return
		}
		r := p.run(p.folded + 1)
		if r != nil {
			if now-r.last < p.horizon {
				return
			}
			p.foldRun(r)
		}
		p.folded++
	}
}

func (p *sighting) foldRun(r *run) {
	last := -1
	for off := uint32(0); off < r.n; off++ {
		c := class(r.partial && off == r.n-1, r.pre, off)
		p.admitted[c]++
		if off < r.extent {
			p.reused[c]++
		}
		if c != last {
			p.runsIn[c]++
			last = c
		}
	}
	if p.sinceHalf += float64(r.n); p.sinceHalf >= halveAt {
		p.sinceHalf = 0
		for c := range p.admitted {
			p.admitted[c] /= 2
			p.reused[c] /= 2
			p.runsIn[c] /= 2
		}
	}
}

// plan chooses the classes to skip. Skipping a block loses the reuses of
// every block behind it in its run too (a lookup stops at the first missing
// block), so for full blocks the choice is, per chain-position class, an
// offset from which the rest of each run is skipped; a partial block is
// always last, so its class is skipped or not on its own. Step by step, the
// candidate with the lowest reuse rate (the offset classes just before each
// cut, down to one with enough evidence, or a partial class) is skipped
// while the reuses of all that is skipped stay within budget of the blocks
// admitted.
func (p *sighting) plan() {
	total := 0.0
	for c := range p.admitted {
		total += p.admitted[c]
		// Without evidence, partial blocks are skipped (their hash changes
		// when the next turn extends them) and full blocks written.
		p.skip[c] = c >= preClasses*offClasses && p.runsIn[c] < minEvidence
	}
	var cut [preClasses]int // per chain-position class: offset classes from here on are skipped
	var stuck [preClasses]bool
	var partialDone [preClasses]bool
	for pre := range cut {
		cut[pre] = offClasses
	}
	lost := 0.0
	for {
		bestPre, bestTo, bestCost, bestRate, partial := -1, 0, 0.0, 0.0, false
		for pre := range cut {
			if !stuck[pre] {
				// The run's tail from some offset class k to the cut: k is
				// the first class down with enough evidence.
				reused, admitted := 0.0, 0.0
				for k := cut[pre] - 1; k >= 0; k-- {
					c := pre*offClasses + k
					reused += p.reused[c]
					admitted += p.admitted[c]
					if p.runsIn[c] >= minEvidence {
						if r := reused / admitted; bestPre < 0 || r < bestRate {
							bestPre, bestTo, bestCost, bestRate, partial = pre, k, reused, r, false
						}
						break
					}
				}
			}
			if c := preClasses*offClasses + pre; !partialDone[pre] && p.runsIn[c] >= minEvidence {
				if r := p.rate(c); bestPre < 0 || r < bestRate {
					bestPre, bestCost, bestRate, partial = pre, p.reused[c], r, true
				}
			}
		}
		switch {
		case bestPre < 0:
			return
		case partial:
			partialDone[bestPre] = true
			if lost+bestCost <= budget*total {
				lost += bestCost
				p.skip[preClasses*offClasses+bestPre] = true
			}
		case lost+bestCost > budget*total:
			stuck[bestPre] = true // too costly; a cheaper one may still fit
		default:
			lost += bestCost
			for k := bestTo; k < cut[bestPre]; k++ {
				p.skip[bestPre*offClasses+k] = true
			}
			cut[bestPre] = bestTo
		}
	}
}

func (p *sighting) rate(c int) float64 { return p.reused[c] / p.admitted[c] }

func class(partial bool, pre uint8, off uint32) int {
	if partial {
		return preClasses*offClasses + int(pre)
	}
	return int(pre)*offClasses + int(logClass(off, offClasses))
}

// logClass is 0 for 0, then 1 + floor(log2 v), at most classes-1.
func logClass(v uint32, classes int) uint8 {
	k := 0
	for ; v > 0 && k < classes-1; v >>= 1 {
		k++
	}
	return uint8(k)
}

var guest = newSighting()

//go:wasmexport kvmesh_abi_version
func abiVersion() int32 { return sdk.ABIVersion }

//go:wasmexport kvmesh_buffer
func buffer(records int32) int32 { return sdk.Buffer(records) }

//go:wasmexport kvmesh_admit
func admit(n int32) int32 { return sdk.HandleAdmit(guest, n) }

func main() {}
