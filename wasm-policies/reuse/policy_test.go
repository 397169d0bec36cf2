package main

import (
	"math/rand/v2"
	"testing"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/wasm-policies/internal/native"
)

// TestEvictsPartialTailBeforeReusedChain: conversations whose full blocks
// come back at the next turn, each request ending in a partial block that
// never does. Once the model has learnt that, a victim is a partial tail,
// not a block of a chain due for its next turn.
func TestEvictsPartialTailBeforeReusedChain(t *testing.T) {
	p := newPolicy()
	e := native.Eviction(p)
	var now int64
	next := uint64(1)
	var chains [][]uint64 // full blocks of the live conversations
	for step := 0; step < 400; step++ {
		now += 1e9
		var chain []uint64
		if len(chains) > 0 && step%2 == 1 {
			chain = chains[0] // the oldest conversation's next turn
			chains = chains[1:]
		}
		var batch []policy.Event
		var parent uint64
		for pos, id := range chain {
			batch = append(batch, policy.Event{Time: now, ID: id, Parent: parent, ChainPos: uint32(pos), Tokens: 512, Kind: policy.EventHit})
			parent = id
		}
		for range 3 { // new full blocks, then the partial tail
			chain = append(chain, next)
			batch = append(batch, policy.Event{Time: now, ID: next, Parent: parent, ChainPos: uint32(len(chain) - 1), Tokens: 512, Kind: policy.EventInsert})
			parent, next = next, next+1
		}
		batch = append(batch, policy.Event{Time: now, ID: next, Parent: parent, ChainPos: uint32(len(chain)), Tokens: 100, Kind: policy.EventInsert})
		next++
		e.Observe(batch)
		chains = append(chains, chain)
	}
	if !p.trained {
		t.Fatal("the model never trained")
	}
	for range 5 {
		v := e.Victims(nil, 1)
		if len(v) != 1 {
			t.Fatalf("victims %v, want one", v)
		}
		i, _ := p.at.Get(v[0])
		if !p.blocks[i].partial {
			t.Fatalf("victim %d is a full block of a chain due for reuse, not a partial tail", v[0])
		}
		e.Observe([]policy.Event{{Time: now, ID: v[0], Kind: policy.EventRemove}})
	}
}

// TestGhostReturnTeaches: a block evicted and then asked for again is a
// reuse the model counts, at the age it came back, and it proves that ids
// outlive eviction.
func TestGhostReturnTeaches(t *testing.T) {
	p := newPolicy()
	e := native.Eviction(p)
	e.Observe([]policy.Event{{Time: 1e9, ID: 7, Tokens: 512, Kind: policy.EventMiss}, {Time: 1e9, ID: 7, Tokens: 512, Kind: policy.EventInsert}})
	e.Observe([]policy.Event{{Time: 2e9, ID: 7, Kind: policy.EventRemove}})
	if p.stable {
		t.Fatal("stable before any evicted id came back")
	}
	i, _ := p.at.Get(7)
	class := p.blocks[i].class
	before := p.reuse[class][ageBucket(60_000)]
	e.Observe([]policy.Event{{Time: 61e9, ID: 7, Tokens: 512, Kind: policy.EventMiss}})
	if !p.stable {
		t.Fatal("an evicted id came back, yet ids are not taken as stable")
	}
	if got := p.reuse[class][ageBucket(60_000)]; got != before+1 {
		t.Fatalf("reuses of class %d at 60 s: %v, want %v", class, got, before+1)
	}
	e.Observe([]policy.Event{{Time: 61e9, ID: 7, Tokens: 512, Kind: policy.EventInsert}})
	if v := e.Victims(nil, 4); len(v) != 1 || v[0] != 7 {
		t.Fatalf("victims %v, want [7]", v)
	}
}

// TestVictimsAlwaysValid drives the policy as a store might: ids that are
// not stable, unknown parents and tokens, parent cycles, hits and removes
// of anything. Every answer must name distinct blocks the tier holds, as
// many as asked for or all it holds.
func TestVictimsAlwaysValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	p := newPolicy()
	e := native.Eviction(p)
	held := map[uint64]bool{}
	var now int64
	for round := range 3000 {
		now += int64(rng.IntN(3)) * 1e9
		batch := make([]policy.Event, 1+rng.IntN(20))
		for k := range batch {
			id := 1 + rng.Uint64N(400)
			ev := policy.Event{Time: now, ID: id, Parent: rng.Uint64N(400), Tokens: uint32(rng.IntN(600)), Kind: policy.EventKind(1 + rng.IntN(5))}
			if rng.IntN(4) == 0 {
				ev.Parent = id + 1 // cycles and chains pointing forward
			}
			switch ev.Kind {
			case policy.EventInsert:
				held[id] = true
			case policy.EventRemove, policy.EventDemote:
				delete(held, id)
			}
			batch[k] = ev
		}
		e.Observe(batch)
		max := rng.IntN(50)
		v := e.Victims(nil, max)
		if want := min(max, len(held)); len(v) < want || len(v) > max {
			t.Fatalf("round %d: %d victims, want %d to %d", round, len(v), want, max)
		}
		seen := map[uint64]bool{}
		for _, id := range v {
			if !held[id] || seen[id] {
				t.Fatalf("round %d: victim %d not held or named twice (%v)", round, id, v)
			}
			seen[id] = true
		}
		if rng.IntN(2) == 0 {
			var rm []policy.Event
			for _, id := range v {
				rm = append(rm, policy.Event{Time: now, ID: id, Kind: policy.EventRemove})
				delete(held, id)
			}
			e.Observe(rm)
		}
	}
}
