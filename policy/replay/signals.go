package replay

import (
	"cmp"
	"slices"
)

// Signal is one thing an online policy can know about a request when it
// arrives, and how well it tells requests whose prefix comes back from those
// whose prefix never does.
type Signal struct {
	Name string `json:"name"`
	// AUC is the probability that a request that continued scores higher
	// than one that did not (ties count half): 0.5 means no information,
	// 0 or 1 a perfect split; -1 where no such pair exists.
	AUC           float64 `json:"auc"`
	AUCFirstTurns float64 `json:"auc_first_turns"`
	AUCLaterTurns float64 `json:"auc_later_turns"`
}

// SignalReport says how predictable reuse is in a trace: how often a
// request's prefix is sent again, by turn, and per online signal.
type SignalReport struct {
	Requests       int `json:"requests"`
	FirstTurns     int `json:"first_turns"`
	ContinuedFirst int `json:"continued_first_turns"`
	LaterTurns     int `json:"later_turns"`
	ContinuedLater int `json:"continued_later_turns"`
	// ContinuedByTurn[k] is the share of requests with k earlier turns
	// whose prefix comes back; the last entry gathers the deeper ones.
	ContinuedByTurn []float64 `json:"continued_by_turn"`
	Signals         []Signal  `json:"signals"`
	// BlockClassAUC is how well simple online classes of a block access
	// (blocks of its request never asked for before, in steps 0, 1-2, 3-7,
	// 8-31, 32+; instants the block was asked for, 1, 2, 3-4, 5+; a partial
	// last block or not) rank the accesses after which the block is asked
	// for again above the rest, each class scored by its reuse rate over
	// the whole trace. Fitted in-sample, it is more than a policy learning
	// as it goes can know; Hints.ClassAUC is the same measure of classes
	// that swap new blocks for hints. BlockClassAUCFirst is the same over
	// blocks' first accesses only, the ones admission decides on.
	BlockClassAUC      float64 `json:"block_class_auc"`
	BlockClassAUCFirst float64 `json:"block_class_auc_first"`
}

// maxTurnBucket is where ContinuedByTurn stops counting turns separately.
const maxTurnBucket = 8

// Signals measures, for every request of trace, whether a later request
// resends its full-block prefix (it "continued": the blocks a cache keeps
// for it are reused), and what an online policy could have known on its
// arrival: its turn in the conversation (a request's parent is the earlier
// request whose last full block is the deepest it contains), its new
// tokens, its length, the time since its parent and the tokens of its
// partial last block. Requests of fewer than three blocks are left out:
// their only full block is the first, which a trace's requests tend to
// share (a system prompt), so it says nothing about their conversation.
func Signals(trace []Request, blockTokens int) SignalReport {
	type turn struct {
		idx       int // into trace
		turns     int
		continued bool
		newTokens int
		gapMs     int64 // -1: first turn
	}
	var all []turn
	endsAt := map[uint64]int{} // last full block → the latest request (index into all) ending there
	for i, req := range trace {
		ids := req.HashIDs
		if len(ids) < 3 {
			continue
		}
		t := turn{idx: i, newTokens: req.InputLength, gapMs: -1}
		// Every earlier request whose last full block this one carries had
		// its prefix sent again; the deepest of them is the parent.
		parent := -1
		for k := len(ids) - 1; k >= 1; k-- {
			if p, ok := endsAt[ids[k]]; ok {
				all[p].continued = true
				if parent < 0 {
					parent = p
				}
			}
		}
		if parent >= 0 {
			p := all[parent]
			t.turns = p.turns + 1
			t.newTokens = req.InputLength - trace[p.idx].InputLength
			t.gapMs = req.Timestamp - trace[p.idx].Timestamp
		}
		endsAt[ids[len(ids)-2]] = len(all)
		all = append(all, t)
	}

	rep := SignalReport{Requests: len(all), ContinuedByTurn: make([]float64, maxTurnBucket+1)}
	perTurn := make([]int, maxTurnBucket+1)
	for _, t := range all {
		b := min(t.turns, maxTurnBucket)
		perTurn[b]++
		if t.continued {
			rep.ContinuedByTurn[b]++
		}
		if t.turns == 0 {
			rep.FirstTurns++
			if t.continued {
				rep.ContinuedFirst++
			}
		} else {
			rep.LaterTurns++
			if t.continued {
				rep.ContinuedLater++
			}
		}
	}
	for b, n := range perTurn {
		if n > 0 {
			rep.ContinuedByTurn[b] /= float64(n)
		}
	}

	signals := []struct {
		name  string
		value func(turn) float64
		later bool // defined for later turns only
	}{
		{"turns", func(t turn) float64 { return float64(t.turns) }, false},
		{"new_tokens", func(t turn) float64 { return float64(t.newTokens) }, false},
		{"input_tokens", func(t turn) float64 { return float64(trace[t.idx].InputLength) }, false},
		{"tail_tokens", func(t turn) float64 {
			req := trace[t.idx]
			return float64(req.InputLength - blockTokens*(len(req.HashIDs)-1))
		}, false},
		{"gap_since_parent_s", func(t turn) float64 { return float64(t.gapMs) / 1000 }, true},
	}
	for _, s := range signals {
		var every, first, later []scored
		for _, t := range all {
			x := scored{s.value(t), t.continued}
			if t.turns == 0 {
				first = append(first, x)
			} else {
				later = append(later, x)
			}
			if !s.later || t.turns > 0 {
				every = append(every, x)
			}
		}
		rep.Signals = append(rep.Signals, Signal{Name: s.name, AUC: auc(every), AUCFirstTurns: auc(first), AUCLaterTurns: auc(later)})
		if s.later {
			rep.Signals[len(rep.Signals)-1].AUCFirstTurns = -1
		}
	}
	acc := accessesOf(trace, blockTokens)
	rep.BlockClassAUC = classAUC(acc, onlineClass, nil)
	rep.BlockClassAUCFirst = classAUC(acc, onlineClass, func(a *access) bool { return a.first })
	return rep
}

// step is the index of the first edge n does not exceed, or len(edges).
func step(n int, edges ...int) int {
	for i, e := range edges {
		if n <= e {
			return i
		}
	}
	return len(edges)
}

type scored struct {
	value    float64
	positive bool
}

// auc is the Mann-Whitney estimate of P(a positive outscores a negative),
// ties counting half, or -1 without both kinds.
func auc(xs []scored) float64 {
	slices.SortFunc(xs, func(a, b scored) int { return cmp.Compare(a.value, b.value) })
	var positives, negatives, rankSum float64
	for i := 0; i < len(xs); {
		j := i
		for j < len(xs) && xs[j].value == xs[i].value {
			j++
		}
		mid := float64(i+j+1) / 2 // average 1-based rank of the tie group
		for _, x := range xs[i:j] {
			if x.positive {
				positives++
				rankSum += mid
			} else {
				negatives++
			}
		}
		i = j
	}
	if positives == 0 || negatives == 0 {
		return -1
	}
	return (rankSum - positives*(positives+1)/2) / (positives * negatives)
}
