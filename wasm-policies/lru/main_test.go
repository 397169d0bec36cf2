package main

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/wasm-policies/internal/native"
)

// TestMatchesNativeLRU drives the guest and the agent's native LRU with the
// same random stream: their victims must agree exactly.
func TestMatchesNativeLRU(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	guest, ref := native.Eviction(newLRU()), policy.NewLRU()
	kinds := []policy.EventKind{policy.EventInsert, policy.EventInsert, policy.EventHit, policy.EventMiss, policy.EventRemove, policy.EventDemote}
	for round := range 2000 {
		batch := make([]policy.Event, 1+rng.IntN(30))
		for i := range batch {
			batch[i] = policy.Event{ID: 1 + rng.Uint64N(500), Kind: kinds[rng.IntN(len(kinds))]}
		}
		guest.Observe(batch)
		ref.Observe(batch)
		max := rng.IntN(40)
		if got, want := guest.Victims(nil, max), ref.Victims(nil, max); !slices.Equal(got, want) {
			t.Fatalf("round %d: victims %v, native LRU %v", round, got, want)
		}
	}
}

// TestMatchesNativeLRUAtScale does the same with tens of thousands of
// blocks, sequential ids like the store's as well as scattered ones, so the
// guest's table grows and its removals shift long probe chains.
func TestMatchesNativeLRUAtScale(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	guest, ref := native.Eviction(newLRU()), policy.NewLRU()
	next := uint64(1)
	var live []uint64
	for round := range 400 {
		batch := make([]policy.Event, 0, 512)
		for range cap(batch) {
			switch r := rng.IntN(10); {
			case r < 4 || len(live) == 0: // a new block
				id := next
				if round%2 == 1 {
					id = rng.Uint64() | 1
				}
				next++
				live = append(live, id)
				batch = append(batch, policy.Event{ID: id, Kind: policy.EventInsert})
			case r < 7:
				batch = append(batch, policy.Event{ID: live[rng.IntN(len(live))], Kind: policy.EventHit})
			case r < 8:
				batch = append(batch, policy.Event{ID: next + 1_000_000, Kind: policy.EventMiss})
			default:
				i := rng.IntN(len(live))
				batch = append(batch, policy.Event{ID: live[i], Kind: policy.EventRemove})
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
			}
		}
		guest.Observe(batch)
		ref.Observe(batch)
		max := rng.IntN(3000)
		if got, want := guest.Victims(nil, max), ref.Victims(nil, max); !slices.Equal(got, want) {
			t.Fatalf("round %d: %d victims, native LRU %d, or they differ", round, len(got), len(want))
		}
	}
	if len(live) < 20_000 {
		t.Fatalf("only %d blocks live at the end", len(live))
	}
}
