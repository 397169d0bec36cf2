package main

import (
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/policy/replay"
	"github.com/kvmesh/kvmesh/wasm-policies/internal/native"
)

// TestBeatsLRUOnSyntheticConversations replays synthetic traces unlike
// the conversation trace (other prompt sharing, turn sizes, gaps): the
// policy must not be a fit to one file. The real trace is replayed through
// the wasm module in policy/replay's tests.
func TestBeatsLRUOnSyntheticConversations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      replay.SyntheticConfig
		capacity int64
	}{
		{"few prompts, slow turns", replay.SyntheticConfig{Seed: 1, Duration: 30 * time.Minute, Rate: 2, SystemPrompts: 3, PromptBlocks: 2, NewBlocks: 12, Continue: 0.35, MedianGap: 2 * time.Minute}, 2_000_000},
		{"many prompts, quick turns", replay.SyntheticConfig{Seed: 2, Duration: 30 * time.Minute, Rate: 4, SystemPrompts: 20, PromptBlocks: 6, NewBlocks: 6, Continue: 0.5, MedianGap: 40 * time.Second}, 1_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			trace := replay.Synthetic(tc.cfg)
			lru, err := replay.Run(trace, replay.Config{CapacityTokens: tc.capacity, Eviction: func(policy.Tier) (policy.Eviction, error) { return policy.NewLRU(), nil }})
			if err != nil {
				t.Fatal(err)
			}
			got, err := replay.Run(trace, replay.Config{CapacityTokens: tc.capacity, Eviction: func(policy.Tier) (policy.Eviction, error) { return native.Eviction(newPolicy()), nil }})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("hit rate %.4f, LRU %.4f", got.HitRate(), lru.HitRate())
			if got.HitRate() < lru.HitRate()+0.02 {
				t.Fatalf("hit rate %.4f, LRU %.4f: want at least 0.02 better", got.HitRate(), lru.HitRate())
			}
		})
	}
}

// TestKeepsBlocksDueForReuse: chains whose full blocks are used again
// once, a minute after they arrive, in a tier too small to hold a minute
// of them with their partial blocks. Once the model has learnt that
// partial blocks and used-up chains are not asked for again, those are
// the victims and every block still due for its reuse stays.
func TestKeepsBlocksDueForReuse(t *testing.T) {
	t.Parallel()
	p := newPolicy()
	e := native.Eviction(p)
	const capacity, gap = 150, 60 // blocks; seconds (one chain a second)
	cached := 0
	var now int64
	for i := uint64(0); i < 3000; i++ {
		now += int64(time.Second)
		base := 3*i + 1
		if i >= gap {
			old := 3*(i-gap) + 1
			e.Observe([]policy.Event{{Time: now, ID: old, Kind: policy.EventHit}, {Time: now, ID: old + 1, Parent: old, ChainPos: 1, Kind: policy.EventHit}})
		}
		if over := cached + 3 - capacity; over > 0 {
			v := e.Victims(nil, over)
			for _, id := range v {
				e.Observe([]policy.Event{{Time: now, ID: id, Kind: policy.EventRemove}})
			}
			cached -= len(v)
		}
		e.Observe([]policy.Event{
			{Time: now, ID: base, Kind: policy.EventInsert, Tokens: 512},
			{Time: now, ID: base + 1, Parent: base, ChainPos: 1, Kind: policy.EventInsert, Tokens: 512},
			{Time: now, ID: base + 2, Parent: base + 1, ChainPos: 2, Kind: policy.EventInsert, Tokens: 100},
		})
		cached += 3
	}
	for i := uint64(3000 - gap); i < 3000; i++ {
		for _, id := range []uint64{3*i + 1, 3*i + 2} {
			if k, ok := p.at.Get(id); !ok || !p.blocks[k].cached {
				t.Fatalf("block %d, due for reuse, was evicted", id)
			}
		}
	}
}
