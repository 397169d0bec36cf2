package replay

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"time"
)

// SyntheticConfig shapes a synthetic trace of multi-turn conversations in
// the Mooncake format: each conversation opens on one of a few shared
// system prompts, and each later turn resends the whole history (its full
// blocks) plus new blocks, ending in a partial block the next turn will
// not reuse.
type SyntheticConfig struct {
	Seed          uint64
	Duration      time.Duration // of the trace
	Rate          float64       // new conversations per second
	SystemPrompts int           // shared prefixes conversations open on
	PromptBlocks  int           // blocks of a system prompt
	NewBlocks     float64       // median new full blocks per turn
	Continue      float64       // chance a first turn gets a second; it grows by a tenth per turn
	MedianGap     time.Duration // median time between turns
}

// Synthetic generates a trace. The same config always yields the same
// trace.
func Synthetic(cfg SyntheticConfig) []Request {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6b766d657368))
	var nextID uint64
	newID := func() uint64 { nextID++; return nextID - 1 }
	prompts := make([][]uint64, max(cfg.SystemPrompts, 1))
	for i := range prompts {
		for range max(cfg.PromptBlocks, 1) {
			prompts[i] = append(prompts[i], newID())
		}
	}
	logNormal := func(median, sigma float64) float64 { return median * math.Exp(sigma*rng.NormFloat64()) }

	var pending turnQueue
	end := cfg.Duration.Seconds()
	for t := 0.0; ; {
		t += rng.ExpFloat64() / cfg.Rate
		if t >= end {
			break
		}
		heap.Push(&pending, &turn{at: t, turn: 1, history: prompts[rng.IntN(len(prompts))]})
	}
	var trace []Request
	for pending.Len() > 0 {
		tn := heap.Pop(&pending).(*turn)
		ids := append([]uint64(nil), tn.history...)
		for range int(math.Round(logNormal(cfg.NewBlocks, 0.9))) {
			ids = append(ids, newID())
		}
		full := ids
		partial := 1 + rng.IntN(511)
		ids = append(ids, newID())
		trace = append(trace, Request{
			Timestamp:    int64(tn.at * 1000),
			InputLength:  512*(len(ids)-1) + partial,
			OutputLength: 1 + rng.IntN(800),
			HashIDs:      ids,
		})
		p := min(cfg.Continue+0.1*float64(tn.turn-1), 0.9)
		if gap := logNormal(cfg.MedianGap.Seconds(), 0.8); rng.Float64() < p && tn.at+gap < end {
			heap.Push(&pending, &turn{at: tn.at + gap, turn: tn.turn + 1, history: full})
		}
	}
	return trace
}

type turn struct {
	at      float64 // seconds
	turn    int
	history []uint64
}

type turnQueue []*turn

func (q turnQueue) Len() int           { return len(q) }
func (q turnQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q turnQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *turnQueue) Push(x any)        { *q = append(*q, x.(*turn)) }
func (q *turnQueue) Pop() any {
	old := *q
	t := old[len(old)-1]
	*q = old[:len(old)-1]
	return t
}
