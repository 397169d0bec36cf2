package main

import (
	"testing"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/wasm-policies/internal/native"
)

func ev(kind policy.EventKind, ids ...uint64) []policy.Event {
	out := make([]policy.Event, len(ids))
	for i, id := range ids {
		out[i] = policy.Event{ID: id, Kind: kind}
	}
	return out
}

// evict runs one eviction of n blocks as the store would.
func evict(p policy.Eviction, n int) []uint64 {
	v := p.Victims(nil, n)
	p.Observe(ev(policy.EventRemove, v...))
	return v
}

func TestOneHitWondersGoFirst(t *testing.T) {
	p := native.Eviction(newS3FIFO())
	// Blocks 1-10 are used again soon after they arrive; 11-100 never.
	p.Observe(ev(policy.EventInsert, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
	p.Observe(ev(policy.EventHit, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
	for id := uint64(11); id <= 100; id++ {
		p.Observe(ev(policy.EventInsert, id))
		if id > 20 {
			evict(p, 1)
		}
	}
	left := map[uint64]bool{}
	for _, id := range p.Victims(nil, 100) {
		left[id] = true
	}
	for id := uint64(1); id <= 10; id++ {
		if !left[id] {
			t.Fatalf("block %d, used twice, was evicted before one-hit wonders", id)
		}
	}
	if len(left) != 20 {
		t.Fatalf("%d blocks tracked, want 20", len(left))
	}
}

func TestGhostReturnsToMain(t *testing.T) {
	p := native.Eviction(newS3FIFO())
	p.Observe(ev(policy.EventInsert, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
	if v := evict(p, 1); v[0] != 1 {
		t.Fatalf("first victim %v, want the oldest block 1", v)
	}
	// Block 1 comes back: a ghost goes straight to main and outlives the
	// small FIFO's one-hit wonders.
	p.Observe(ev(policy.EventInsert, 1))
	v := evict(p, 9)
	for _, id := range v {
		if id == 1 {
			t.Fatalf("the returning ghost was evicted among %v", v)
		}
	}
}
