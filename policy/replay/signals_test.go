package replay

import (
	"slices"
	"testing"
)

// TestSignalsFollowConversations: turns, continuation and the time since
// the parent come from the hash chains, and a request too short to have a
// full block of its own is left out.
func TestSignalsFollowConversations(t *testing.T) {
	t.Parallel()
	tr := []Request{
		{Timestamp: 0, InputLength: 1800, HashIDs: []uint64{0, 1, 2, 3}},           // A, turn 1
		{Timestamp: 1000, InputLength: 1700, HashIDs: []uint64{0, 10, 11, 12}},     // B, never continued
		{Timestamp: 2000, InputLength: 700, HashIDs: []uint64{0, 20}},              // too short
		{Timestamp: 10000, InputLength: 2300, HashIDs: []uint64{0, 1, 2, 4, 5}},    // A, turn 2: resends 0-2
		{Timestamp: 25000, InputLength: 2900, HashIDs: []uint64{0, 1, 2, 4, 6, 7}}, // A, turn 3: resends 0-4
	}
	r := Signals(tr, 512)
	if r.Requests != 4 || r.FirstTurns != 2 || r.ContinuedFirst != 1 || r.LaterTurns != 2 || r.ContinuedLater != 1 {
		t.Fatalf("report %+v: want 4 requests, first turns 1 of 2 continued, later turns 1 of 2", r)
	}
	if want := []float64{0.5, 1, 0, 0, 0, 0, 0, 0, 0}; !slices.Equal(r.ContinuedByTurn, want) {
		t.Errorf("continued by turn %v, want %v", r.ContinuedByTurn, want)
	}
	// Turn 2 continued and turn 3 did not: the later gap (15 s against
	// 10 s) and the later turn both point the wrong way.
	for _, s := range r.Signals {
		switch s.Name {
		case "gap_since_parent_s", "turns":
			if s.AUCLaterTurns != 0 {
				t.Errorf("%s: AUC on later turns %v, want 0", s.Name, s.AUCLaterTurns)
			}
		case "new_tokens": // first turns: A (1800, continued) against B (1700)
			if s.AUCFirstTurns != 1 {
				t.Errorf("new_tokens: AUC on first turns %v, want 1", s.AUCFirstTurns)
			}
		}
	}
}

func TestAUC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []scored
		want float64
	}{
		{"perfect", []scored{{1, false}, {2, false}, {3, true}, {4, true}}, 1},
		{"reversed", []scored{{1, true}, {2, false}}, 0},
		{"all tied", []scored{{5, true}, {5, false}, {5, false}}, 0.5},
		{"one of four pairs wrong", []scored{{1, false}, {2, true}, {3, false}, {4, true}}, 0.75},
		{"no negatives", []scored{{1, true}, {2, true}}, -1},
	} {
		if got := auc(tc.in); got != tc.want {
			t.Errorf("%s: auc %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBlockClassAUC: each access is scored by its class's reuse rate. The
// first request's two blocks share a class (two new blocks, first use), of
// which one is reused; the second request's block (no new block, second
// use) never is: the reused access outranks one of the two others and
// ties with the other.
func TestBlockClassAUC(t *testing.T) {
	t.Parallel()
	tr := []Request{
		{Timestamp: 0, InputLength: 1024, HashIDs: []uint64{0, 1}},
		{Timestamp: 1000, InputLength: 512, HashIDs: []uint64{0}},
	}
	r := Signals(tr, 512)
	if r.BlockClassAUC != 0.75 {
		t.Errorf("block class AUC %v, want 0.75", r.BlockClassAUC)
	}
	// First accesses: the first request's two, one class, a tie.
	if r.BlockClassAUCFirst != 0.5 {
		t.Errorf("block class AUC over first accesses %v, want 0.5", r.BlockClassAUCFirst)
	}
}

// TestAccessesOfOneInstantAreOne: two requests of one instant asking for a
// block are one access, which a request of that instant does not reuse;
// a later instant does.
func TestAccessesOfOneInstantAreOne(t *testing.T) {
	t.Parallel()
	tr := []Request{
		{Timestamp: 0, InputLength: 1024, HashIDs: []uint64{0, 1}},
		{Timestamp: 0, InputLength: 1024, HashIDs: []uint64{0, 2}},
		{Timestamp: 3000, InputLength: 1024, HashIDs: []uint64{0, 1}},
	}
	type got struct {
		id           uint64
		uses         int
		first, reuse bool
	}
	var have []got
	for _, a := range accessesOf(tr, 512) {
		have = append(have, got{a.key.id - 1, a.uses, a.first, a.reused})
	}
	want := []got{{0, 1, true, true}, {1, 1, true, true}, {2, 1, true, false}, {0, 2, false, false}, {1, 2, false, false}}
	if !slices.Equal(have, want) {
		t.Fatalf("accesses %+v, want %+v", have, want)
	}
}
