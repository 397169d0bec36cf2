package policy

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvmesh/kvmesh/internal/testenv"
)

// shipped lists the policies of wasm-policies/ and the slots each fills.
var shipped = map[string][]Slot{
	"lru":           {SlotEviction},
	"s3fifo":        {SlotEviction},
	"reuse":         {SlotEviction},
	"sighting":      {SlotAdmission},
	"chainprefetch": {SlotPrefetch},
}

// TestShippedPoliciesValidate runs each shipped module through what an
// upload checks: compilation, the ABI, the sandbox's imports and the dry
// run.
func TestShippedPoliciesValidate(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, Limits{})
	for name, slots := range shipped {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := compile(t, rt, testenv.ReadPolicy(t, name))
			if got := m.Slots(); len(got) != len(slots) || got[0] != slots[0] {
				t.Fatalf("implements %v, want %v", got, slots)
			}
			if err := m.DryRun(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWasmLRUMatchesNative runs the shipped lru module and the native LRU
// side by side through the host: every answer must agree, so the module
// never falls back.
func TestWasmLRUMatchesNative(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, Limits{})
	w, err := compile(t, rt, testenv.ReadPolicy(t, "lru")).NewEviction(context.Background(), TierMemory, BindConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ref := NewLRU()
	rng := rand.New(rand.NewPCG(7, 8))
	kinds := []EventKind{EventInsert, EventInsert, EventHit, EventMiss, EventRemove, EventDemote}
	for round := range 3000 {
		batch := make([]Event, 1+rng.IntN(60))
		for i := range batch {
			batch[i] = Event{ID: 1 + rng.Uint64N(2000), Kind: kinds[rng.IntN(len(kinds))]}
		}
		w.Observe(batch)
		ref.Observe(batch)
		if round%7 == 0 {
			max := rng.IntN(80)
			if got, want := w.Victims(nil, max), ref.Victims(nil, max); !slices.Equal(got, want) {
				t.Fatalf("round %d: wasm victims %v, native %v", round, got, want)
			}
		}
	}
	if w.Err() != nil {
		t.Fatalf("module fell back: %v", w.Err())
	}
}
