package replay

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/kvmesh/kvmesh/policy"
)

// Hints is an oracle of reuse of a chosen quality, for measuring how well
// a policy would have to predict reuse to reach a hit rate: for every
// block access of a trace, a score that ranks the accesses followed by
// another access of the block above the rest with probability AUC.
//
// Scores are binormal, as in signal detection: the label (1 if the block
// is asked for again, else 0) times the separation d that gives the AUC,
// plus one normal draw per request, shared by its blocks. A real predictor
// scores a request from what is known of it, so its errors hit a request's
// blocks together; independent errors per block would cut most chains
// short of their first missing block instead. With several requests of one
// instant asking for one block, the best score stands for all. Draws come
// from a fixed seed: reports repeat.
type Hints struct {
	score  map[hintKey]float64
	sorted []float64 // every access's score
	fresh  float64   // median score of first accesses
	auc    float64
}

type hintKey struct {
	time int64 // ns, as a replay's events carry it
	id   uint64
}

// NewHints draws hints of quality (an AUC) (clamped to [0.5, 1]) for trace.
func NewHints(trace []Request, quality float64) *Hints {
	d := 2 * math.Erfinv(2*min(max(quality, 0.5), 1)-1) // binormal AUC = Φ(d/√2)
	reused := futureReuse(trace)
	rng := rand.New(rand.NewPCG(0x6b766d657368, 0x6f7261636c65))
	h := &Hints{score: map[hintKey]float64{}}
	var firsts []float64
	var all []scored
	seen := map[uint64]bool{}
	for i, req := range trace {
		noise := rng.NormFloat64()
		for j, id := range req.HashIDs {
			s := noise
			switch {
			case math.IsInf(d, 1) && reused[i][j]:
				s = 1
			case math.IsInf(d, 1):
				s = 0
			case reused[i][j]:
				s += d
			}
			k := hintKey{req.Timestamp * 1e6, id + 1}
			if old, ok := h.score[k]; ok {
				s = max(s, old)
			}
			h.score[k] = s
			h.sorted = append(h.sorted, s)
			all = append(all, scored{s, reused[i][j]})
			if !seen[id] {
				firsts = append(firsts, s)
				seen[id] = true
			}
		}
	}
	slices.Sort(h.sorted)
	slices.Sort(firsts)
	if len(firsts) > 0 {
		h.fresh = firsts[len(firsts)/2]
	}
	h.auc = auc(all)
	return h
}

// AUC is the quality the hints have, measured: near the one asked for.
func (h *Hints) AUC() float64 { return h.auc }

// Quantile is the rank, from 0 to 1, of the hint of block id (as the
// replay names it: the trace's hash id plus one) asked for at time (ns)
// among all accesses' hints; 0 for an access the trace does not have.
func (h *Hints) Quantile(time int64, id uint64) float64 {
	s, ok := h.score[hintKey{time, id}]
	if !ok || len(h.sorted) == 0 {
		return 0
	}
	n, _ := slices.BinarySearch(h.sorted, s)
	return float64(n) / float64(len(h.sorted))
}

// Admission is the admission policy that follows the hints: a new block is
// written back to disk only if its hint is above the median of the first
// accesses' hints, so about half the blocks are never written.
func (h *Hints) Admission() policy.Admission { return hintedAdmission{h} }

type hintedAdmission struct{ h *Hints }

func (a hintedAdmission) Admit(inserts []policy.Event, dst []policy.Decision) []policy.Decision {
	for _, e := range inserts {
		d := policy.Decision{Disk: policy.DiskNever}
		if s, ok := a.h.score[hintKey{e.Time, e.ID}]; ok && s > a.h.fresh {
			d.Disk = policy.DiskOnEvict
		}
		dst = append(dst, d)
	}
	return dst
}

// futureReuse labels every block access of trace: whether a later request
// asks for the block again.
func futureReuse(trace []Request) [][]bool {
	reused := make([][]bool, len(trace))
	later := map[uint64]bool{}
	for i := len(trace) - 1; i >= 0; i-- {
		ids := trace[i].HashIDs
		reused[i] = make([]bool, len(ids))
		for j, id := range ids {
			reused[i][j] = later[id]
		}
		for _, id := range ids {
			later[id] = true
		}
	}
	return reused
}
