package policy

import (
	"fmt"
	"testing"
)

func TestLRUVictimOrder(t *testing.T) {
	t.Parallel()
	ev := func(kind EventKind, id uint64) Event { return Event{Kind: kind, ID: id} }
	tests := []struct {
		name   string
		events []Event
		want   string
	}{
		{"insertion order", []Event{ev(EventInsert, 1), ev(EventInsert, 2), ev(EventInsert, 3)}, "[1 2 3]"},
		{"a hit moves a block to the back", []Event{ev(EventInsert, 1), ev(EventInsert, 2), ev(EventHit, 1)}, "[2 1]"},
		{"a hit on an unknown block adds nothing", []Event{ev(EventInsert, 1), ev(EventHit, 9)}, "[1]"},
		{"remove and demote forget", []Event{ev(EventInsert, 1), ev(EventInsert, 2), ev(EventInsert, 3),
			ev(EventRemove, 1), ev(EventDemote, 3)}, "[2]"},
		{"a re-insert refreshes", []Event{ev(EventInsert, 1), ev(EventInsert, 2), ev(EventInsert, 1)}, "[2 1]"},
		{"misses are ignored", []Event{ev(EventInsert, 1), ev(EventMiss, 1)}, "[1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := NewLRU()
			l.Observe(tc.events)
			if got := fmt.Sprint(l.Victims(nil, 10)); got != tc.want {
				t.Fatalf("victims %s, want %s", got, tc.want)
			}
			if got := l.Victims(nil, 1); len(got) > 1 {
				t.Fatalf("Victims(max 1) gave %d", len(got))
			}
		})
	}
}

func TestWarmPrefixWarmsDiskBlocksOfTheLeadingRun(t *testing.T) {
	t.Parallel()
	lookup := []Event{
		{Kind: EventHit, ID: 1, Tier: TierMemory},
		{Kind: EventHit, ID: 2, Tier: TierDisk},
		{Kind: EventMiss},
		{Kind: EventHit, ID: 4, Tier: TierDisk}, // after the miss: not part of the prefix
	}
	if got := fmt.Sprint(WarmPrefix{}.Prefetch(lookup, nil)); got != "[2]" {
		t.Fatalf("warmed %s, want [2]", got)
	}
}

func TestWriteBackAdmitsEveryBlockForDemotion(t *testing.T) {
	t.Parallel()
	got := WriteBack{}.Admit(make([]Event, 3), nil)
	if len(got) != 3 || got[0] != (Decision{Disk: DiskOnEvict}) {
		t.Fatalf("decisions %+v", got)
	}
}
