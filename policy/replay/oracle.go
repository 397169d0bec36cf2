package replay

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/kvmesh/kvmesh/policy"
)

// Hints is an oracle of reuse of a chosen quality, for measuring how well
// a policy would have to predict reuse to reach a hit rate: for every
// block access of a trace, a score that ranks the accesses after which
// the block is asked for again above the rest with probability AUC.
//
// Scores are binormal, as in signal detection: the label (1 if the block
// is asked for again, else 0) times the separation d that gives the AUC,
// plus one normal draw per request, shared by its blocks. A real predictor
// scores a request from what is known of it, so its errors hit a request's
// blocks together; independent errors per block would cut most chains
// short of their first missing block instead. Draws come from a fixed
// seed: reports repeat.
type Hints struct {
	acc    []access
	score  map[hintKey]float64
	sorted []float64 // every access's score
	median float64   // of first accesses' scores
}

// maxSeparation stands for AUC 1: no normal draw crosses it, and the
// noise still orders blocks that share a label.
const maxSeparation = 40

// NewHints draws hints for trace whose quality is the AUC asked for,
// clamped to [0.5, 1].
func NewHints(trace []Request, blockTokens int, quality float64) *Hints {
	d := 2 * math.Erfinv(2*min(max(quality, 0.5), 1)-1) // binormal AUC = Φ(d/√2)
	if !(d <= maxSeparation) {
		d = maxSeparation
	}
	rng := rand.New(rand.NewPCG(0x6b766d657368, 0x6f7261636c65))
	h := &Hints{acc: accessesOf(trace, blockTokens), score: map[hintKey]float64{}}
	var firsts []float64
	noise, req := 0.0, -1
	for k := range h.acc {
		a := &h.acc[k]
		if a.req != req {
			noise, req = rng.NormFloat64(), a.req
		}
		s := noise
		if a.reused {
			s += d
		}
		h.score[a.key] = s
		h.sorted = append(h.sorted, s)
		if a.first {
			firsts = append(firsts, s)
		}
	}
	slices.Sort(h.sorted)
	slices.Sort(firsts)
	if len(firsts) > 0 {
		h.median = firsts[len(firsts)/2]
	}
	return h
}

// AUC is the quality the hints have, measured over every access: near the
// one asked for.
func (h *Hints) AUC() float64 { return h.rankAUC(nil) }

// FirstAUC is AUC over blocks' first accesses, the ones admission decides.
func (h *Hints) FirstAUC() float64 { return h.rankAUC(func(a *access) bool { return a.first }) }

func (h *Hints) rankAUC(only func(*access) bool) float64 {
	var xs []scored
	for k := range h.acc {
		if a := &h.acc[k]; only == nil || only(a) {
			xs = append(xs, scored{h.score[a.key], a.reused})
		}
	}
	return auc(xs)
}

// ClassAUC is SignalReport.BlockClassAUC for classes whose first feature
// is the hint's fifth (by Quantile) instead of the new blocks in the
// request: what a policy classing by hints, uses and partial blocks knows.
func (h *Hints) ClassAUC() float64 {
	return classAUC(h.acc, func(a *access) int {
		q, _ := h.Quantile(a.key.time, a.key.id)
		return min(int(q*5), 4)*100 + step(a.uses, 1, 2, 4)*10 + b2i(a.partial)
	}, nil)
}

// Quantile is the rank, from 0 to 1, of the hint of block id (as the
// replay names it: the trace's hash id plus one) asked for at time (ns)
// among all accesses' hints, and whether the trace has that access.
func (h *Hints) Quantile(time int64, id uint64) (float64, bool) {
	s, ok := h.score[hintKey{time, id}]
	if !ok {
		return 0, false
	}
	n, _ := slices.BinarySearch(h.sorted, s)
	return float64(n) / float64(len(h.sorted)), true
}

// Admission is the admission policy that follows the hints: a new block is
// written back to disk only if its hint is above the median of first
// accesses' hints, so about half the blocks are never written.
func (h *Hints) Admission() policy.Admission { return hintedAdmission{h} }

type hintedAdmission struct{ h *Hints }

func (a hintedAdmission) Admit(inserts []policy.Event, dst []policy.Decision) []policy.Decision {
	for _, e := range inserts {
		d := policy.Decision{Disk: policy.DiskNever}
		if s, ok := a.h.score[hintKey{e.Time, e.ID}]; ok && s > a.h.median {
			d.Disk = policy.DiskOnEvict
		}
		dst = append(dst, d)
	}
	return dst
}

// access is a block asked for at an instant: several requests of one
// instant asking for a block are one access, the first one's, as a cache
// serves them alike. It carries what an online policy knows of it and
// whether the block is asked for again at a later instant.
type access struct {
	key     hintKey
	req     int  // index into the trace of its request
	fresh   int  // blocks of its request never asked for before
	uses    int  // instants the block has been asked for, this one included
	partial bool // its request's partial last block
	first   bool // the block's first access
	reused  bool
}

type hintKey struct {
	time int64 // ns, as a replay's events carry it
	id   uint64
}

func accessesOf(trace []Request, blockTokens int) []access {
	var acc []access
	at := map[hintKey]bool{}
	uses := map[uint64]int{}
	for i, req := range trace {
		fresh := 0
		for _, id := range req.HashIDs {
			if uses[id] == 0 {
				fresh++
			}
		}
		n := len(req.HashIDs)
		for j, id := range req.HashIDs {
			k := hintKey{req.Timestamp * 1e6, id + 1}
			if at[k] {
				continue
			}
			at[k] = true
			uses[id]++
			acc = append(acc, access{key: k, req: i, fresh: fresh, uses: uses[id],
				partial: j == n-1 && req.InputLength < blockTokens*n, first: uses[id] == 1})
		}
	}
	latest := map[uint64]int64{} // the last instant each block is asked for
	for k := len(acc) - 1; k >= 0; k-- {
		a := &acc[k]
		t, ok := latest[a.key.id]
		a.reused = ok && t > a.key.time
		if !ok {
			latest[a.key.id] = a.key.time
		}
	}
	return acc
}

// onlineClass is the class of an access by its online features: new
// blocks in its request, uses of the block, partial or not.
func onlineClass(a *access) int {
	return step(a.fresh, 0, 2, 7, 31)*100 + step(a.uses, 1, 2, 4)*10 + b2i(a.partial)
}

// classAUC ranks the accesses only admits (nil: all) by their class's
// reuse rate among them, in-sample, and measures the AUC of that ranking.
func classAUC(acc []access, class func(*access) int, only func(*access) bool) float64 {
	count, hits := map[int]float64{}, map[int]float64{}
	for k := range acc {
		if a := &acc[k]; only == nil || only(a) {
			c := class(a)
			count[c]++
			if a.reused {
				hits[c]++
			}
		}
	}
	var xs []scored
	for k := range acc {
		if a := &acc[k]; only == nil || only(a) {
			c := class(a)
			xs = append(xs, scored{hits[c] / count[c], a.reused})
		}
	}
	return auc(xs)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
