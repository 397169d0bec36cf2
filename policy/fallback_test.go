package policy

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// randomStream is a stream of every kind of event over a few dozen blocks,
// with a sprinkling of id 0 (a lookup's miss of a key never seen).
func randomStream(rng *rand.Rand, n int) []Event {
	kinds := []EventKind{EventInsert, EventInsert, EventInsert, EventHit, EventHit, EventMiss, EventRemove, EventDemote}
	out := make([]Event, n)
	for i := range out {
		out[i] = Event{Time: int64(i), ID: rng.Uint64N(60), Kind: kinds[rng.IntN(len(kinds))]}
		if out[i].ID == 0 {
			out[i].Kind = EventMiss
		}
	}
	return out
}

// TestResidentSetSeedsLRU: the LRU built from what the eviction adapter
// records holds the blocks an LRU fed every event holds, in its order.
func TestResidentSetSeedsLRU(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		stream := randomStream(rng, rng.IntN(2000))
		if round%3 == 0 { // enough blocks for the table to grow
			for i := range stream {
				stream[i].ID = rng.Uint64N(5000) + 1
			}
		}
		held, ref := newResidentSet(), NewLRU()
		for len(stream) > 0 {
			n := min(len(stream), 1+rng.IntN(50))
			held.observe(stream[:n])
			ref.Observe(stream[:n])
			stream = stream[n:]
		}
		if held.len() != ref.Len() {
			t.Fatalf("round %d: %d blocks held, the LRU has %d", round, held.len(), ref.Len())
		}
		for id := range uint64(60) {
			if held.has(id) != ref.Has(id) {
				t.Fatalf("round %d: has(%d) = %v, the LRU says %v", round, id, held.has(id), ref.Has(id))
			}
		}
		if got, want := held.lru().Victims(nil, 1<<20), ref.Victims(nil, 1<<20); !slices.Equal(got, want) {
			t.Fatalf("round %d: seeded LRU evicts %v, the LRU fed every event %v", round, got, want)
		}
	}
}

// TestEvictionFallsBackMidStream takes modules out of service after a
// varying number of events, by a trap in observe, a nonsense answer to
// victims and by closing the binding: the native LRU that answers from
// then on must evict exactly as an LRU fed the whole stream, before and
// after more events arrive.
func TestEvictionFallsBackMidStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, batch := range []int{1, 3, 4, 16, 64} {
		limits := testLimits
		limits.BatchEvents = batch
		rt := newTestRuntime(t, limits)
		traps := compile(t, rt, wat(t, "traps_after_two_batches"))
		lies := compile(t, rt, wat(t, "victims_unknown"))
		for _, how := range []string{"trap", "answer", "close"} {
			rng := rand.New(rand.NewPCG(uint64(batch), 9))
			m := traps
			if how == "answer" {
				m = lies
			}
			var disabled int
			w, err := m.NewEviction(ctx, TierDisk, BindConfig{OnDisable: func(error) { disabled++ }})
			if err != nil {
				t.Fatal(err)
			}
			ref := NewLRU()
			feed := func(events []Event) {
				w.Observe(events)
				ref.Observe(events)
			}
			// Up to the failure: the trap comes with the third batch the
			// module is handed; a lie with the first victims asked for.
			for range 3 {
				feed(randomStream(rng, batch+rng.IntN(3)))
			}
			switch how {
			case "answer":
				if w.Err() != nil {
					t.Fatalf("batch %d: module failed before asked for victims: %v", batch, w.Err())
				}
				if got, want := w.Victims(nil, 5), ref.Victims(nil, 5); ref.Len() > 0 && !slices.Equal(got, want) {
					t.Fatalf("batch %d: after the bad answer victims are %v, the LRU's %v", batch, got, want)
				}
			case "close":
				w.Close()
			}
			if how != "close" && (w.Err() == nil || disabled != 1) {
				t.Fatalf("batch %d, %s: module error %v, %d calls of OnDisable; want it out of service once", batch, how, w.Err(), disabled)
			}
			for range 20 {
				feed(randomStream(rng, rng.IntN(40)))
				max := rng.IntN(70)
				if got, want := w.Victims(nil, max), ref.Victims(nil, max); !slices.Equal(got, want) {
					t.Fatalf("batch %d, %s: after the fallback victims are %v, the LRU's %v", batch, how, got, want)
				}
			}
			w.Close()
		}
	}
}

// TestFallbackAtScale: a real policy module serving thousands of blocks
// fails in the middle of a long stream; the native LRU that takes over
// holds every block, in order.
func TestFallbackAtScale(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, Limits{BatchEvents: 256})
	m := compile(t, rt, wat(t, "traps_after_two_batches"))
	w, err := m.NewEviction(context.Background(), TierMemory, BindConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ref := NewLRU()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		events := make([]Event, 200)
		for i := range events {
			events[i] = Event{ID: 1 + rng.Uint64N(20_000), Kind: []EventKind{EventInsert, EventInsert, EventHit, EventRemove}[rng.IntN(4)]}
		}
		w.Observe(events)
		ref.Observe(events)
	}
	if w.Err() == nil || !strings.Contains(w.Err().Error(), "unreachable") {
		t.Fatalf("module error %v, want its trap", w.Err())
	}
	if ref.Len() < 5000 {
		t.Fatalf("only %d blocks in the tier", ref.Len())
	}
	if got, want := w.Victims(nil, 1<<20), ref.Victims(nil, 1<<20); !slices.Equal(got, want) {
		t.Fatalf("after the fallback %d victims, the LRU's %d, or they differ", len(got), len(want))
	}
}
