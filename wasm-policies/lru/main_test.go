package main

import (
	"math/rand/v2"
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
		if got, want := guest.Victims(nil, max), ref.Victims(nil, max); !equal(got, want) {
			t.Fatalf("round %d: victims %v, native LRU %v", round, got, want)
		}
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
