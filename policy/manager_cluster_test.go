package policy

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// peerFetcher serves modules from other managers, as the mesh would, and
// counts the fetches.
type peerFetcher struct {
	mu    sync.Mutex
	peers map[string]*Manager
	calls int
}

func (f *peerFetcher) fetch(ctx context.Context, digest string) ([]byte, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	for name, m := range f.peers {
		if b, err := m.ModuleBytes(digest); err == nil {
			return b, name, nil
		}
	}
	return nil, "", errors.New("nobody holds it")
}

func (f *peerFetcher) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// clusterManager is a manager named self whose local changes land in out.
func clusterManager(t *testing.T, dir, self string, limits Limits, out *[]Record) (*Manager, *fakeSlots) {
	t.Helper()
	slots := newFakeSlots()
	m, err := NewManager(context.Background(), ManagerConfig{Dir: dir, Token: "tok", Slots: slots, Limits: limits, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	m.SetCluster(self, func(r Record) { *out = append(*out, r) })
	return m, slots
}

func slotOfListing(l Listing, slot, tier string) SlotStatus {
	for _, s := range l.Slots {
		if s.Slot == slot && s.Tier == tier {
			return s
		}
	}
	return SlotStatus{}
}

// A push makes a versioned record; another manager applies it by
// fetching the module, in any order and any number of times, and ends on
// the newest record; rollbacks travel as records too.
func TestManagerAppliesRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var fromA, fromB []Record
	a, _ := clusterManager(t, t.TempDir(), "a", Limits{CallTimeout: 100 * time.Millisecond}, &fromA)
	defer a.Close(ctx)
	bDir := t.TempDir()
	b, bSlots := clusterManager(t, bDir, "b", Limits{CallTimeout: 100 * time.Millisecond}, &fromB)
	f := &peerFetcher{peers: map[string]*Manager{"a": a}}

	first, second := wat(t, "good"), variant(wat(t, "good"), "v2")
	d1, err := a.Push(ctx, first, SlotEviction, TierDisk)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := a.Push(ctx, second, SlotEviction, TierDisk)
	if err != nil {
		t.Fatal(err)
	}
	if len(fromA) != 2 || fromA[0].Version != 1 || fromA[1].Version != 2 || fromA[1].Origin != "a" || fromA[1].Module != d2 || fromA[1].Slot != "eviction/disk" {
		t.Fatalf("records of two pushes: %+v", fromA)
	}
	// Out of order: the newer first, then the older, which changes nothing.
	if err := b.Apply(ctx, fromA[1], f.fetch); err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(ctx, fromA[0], f.fetch); err != nil || f.count() != 1 {
		t.Fatalf("stale record: %v, %d fetches", err, f.count())
	}
	s := slotOfListing(b.List(), "eviction", "disk")
	if s.Active != d2 || s.State != "serving" || s.Version != 2 || s.Origin != "a" || bSlots.evictionOf(TierDisk) == nil {
		t.Fatalf("b after applying: %+v", s)
	}
	if len(fromB) != 0 {
		t.Fatalf("applying a peer's record was announced as a local change: %+v", fromB)
	}
	if b.Newer(fromA[1]) || !b.Newer(Record{Slot: "eviction/disk", Version: 2, Origin: "c"}) {
		t.Fatal("Newer does not order by version, then origin")
	}

	// b's own push now outranks what it heard of.
	b.Observe(41)
	if _, err := b.Push(ctx, first, SlotEviction, TierMemory); err != nil || len(fromB) != 1 || fromB[0].Version != 42 || fromB[0].Origin != "b" {
		t.Fatalf("push after observing 41: %v %+v", err, fromB)
	}
	if err := a.Apply(ctx, fromB[0], (&peerFetcher{peers: map[string]*Manager{"b": b}}).fetch); err != nil {
		t.Fatal(err)
	}

	// A rollback on a reaches b as a record, and b pops its history too.
	if back, err := a.Rollback(ctx, SlotEviction, TierDisk); err != nil || back != d1 {
		t.Fatalf("rollback: %q %v", back, err)
	}
	rb := fromA[len(fromA)-1]
	if !rb.Rollback || rb.Module != d1 || rb.Version != 43 {
		t.Fatalf("rollback record %+v, want a rollback to %s at version 43", rb, d1)
	}
	if err := b.Apply(ctx, rb, f.fetch); err != nil {
		t.Fatal(err)
	}
	if s := slotOfListing(b.List(), "eviction", "disk"); s.Active != d1 || len(s.History) != 1 || s.History[0] != "" || s.Version != 43 {
		t.Fatalf("b after the rollback: %+v", s)
	}

	// The records survive a restart, and so does the clock.
	b.Close(ctx)
	b2, _ := clusterManager(t, bDir, "b", Limits{CallTimeout: 100 * time.Millisecond}, &fromB)
	defer b2.Close(ctx)
	if s := slotOfListing(b2.List(), "eviction", "disk"); s.Active != d1 || s.Version != 43 || s.Origin != "a" {
		t.Fatalf("b after a restart: %+v", s)
	}
	if b2.Newer(rb) {
		t.Fatal("an applied record is newer after a restart")
	}
	if _, err := b2.Rollback(ctx, SlotEviction, TierDisk); err != nil || fromB[len(fromB)-1].Version != 44 {
		t.Fatalf("rollback after restart: %v %+v", err, fromB)
	}
}

// A module that fails validation on one agent is refused there: the slot
// keeps its module, the refusal is listed and counted, and the same record
// is never fetched or tried again.
func TestManagerRefusesInvalidRecordOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var fromA, fromB []Record
	a, _ := clusterManager(t, t.TempDir(), "a", Limits{CallTimeout: 100 * time.Millisecond}, &fromA)
	defer a.Close(ctx)
	// b allows two pages of memory; good.wat wants four.
	b, bSlots := clusterManager(t, t.TempDir(), "b", Limits{CallTimeout: 100 * time.Millisecond, MemoryPages: 2}, &fromB)
	defer b.Close(ctx)
	f := &peerFetcher{peers: map[string]*Manager{"a": a}}

	if _, err := a.Push(ctx, wat(t, "good"), SlotEviction, TierMemory); err != nil {
		t.Fatal(err)
	}
	rec := fromA[0]
	err := b.Apply(ctx, rec, f.fetch)
	if !IsRefused(err) {
		t.Fatalf("apply of a module b cannot run: %v, want a refusal", err)
	}
	for range 3 {
		if err := b.Apply(ctx, rec, f.fetch); err != nil {
			t.Fatalf("the refused record again: %v", err)
		}
	}
	if f.count() != 1 || b.Newer(rec) {
		t.Fatalf("refused record fetched %d times, newer %v; want once, not newer", f.count(), b.Newer(rec))
	}
	s := slotOfListing(b.List(), "eviction", "memory")
	if s.State != "native" || bSlots.evictionOf(TierMemory) != nil || s.Refused == nil || s.Refused.Module != rec.Module || s.Refused.Origin != "a" || !strings.Contains(s.Refused.Error, "memory") {
		t.Fatalf("b's slot after the refusal: %+v (refused %+v)", s, s.Refused)
	}
	if n := counter(t, b.cluster.outcomes.WithLabelValues("eviction_memory", "refused")); n != 1 {
		t.Fatalf("%v refusals counted, want 1", n)
	}
	// The refused record still orders: b's next push outranks it, and
	// what b tells the cluster is the refused record until then.
	if rs := b.Records(); len(rs) != 1 || rs[0].Version != rec.Version || rs[0].Module != rec.Module {
		t.Fatalf("b's records: %+v", rs)
	}
}

// A fetch that fails or brings the wrong bytes changes nothing: the
// record can be applied later. Malformed records are rejected outright.
func TestManagerApplyFetchFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var fromA, fromB []Record
	a, _ := clusterManager(t, t.TempDir(), "a", Limits{CallTimeout: 100 * time.Millisecond}, &fromA)
	defer a.Close(ctx)
	b, _ := clusterManager(t, t.TempDir(), "b", Limits{CallTimeout: 100 * time.Millisecond}, &fromB)
	defer b.Close(ctx)
	if _, err := a.Push(ctx, wat(t, "good"), SlotAdmission, TierMemory); err != nil {
		t.Fatal(err)
	}
	rec := fromA[0]
	wrong := func(context.Context, string) ([]byte, string, error) { return wat(t, "victims_unknown"), "liar", nil }
	down := func(context.Context, string) ([]byte, string, error) { return nil, "", errors.New("unreachable") }
	for _, fetch := range []Fetcher{wrong, down} {
		if err := b.Apply(ctx, rec, fetch); err == nil || IsRefused(err) || !b.Newer(rec) {
			t.Fatalf("failed fetch: %v (newer %v), want a plain error and the record still to apply", err, b.Newer(rec))
		}
	}
	if err := b.Apply(ctx, rec, (&peerFetcher{peers: map[string]*Manager{"a": a}}).fetch); err != nil || b.Newer(rec) {
		t.Fatalf("apply once a peer answers: %v", err)
	}
	for _, bad := range []Record{
		{Slot: "admission", Module: "../../etc/passwd", Version: 9},
		{Slot: "sharding", Version: 9},
	} {
		if err := b.Apply(ctx, bad, down); err == nil {
			t.Fatalf("malformed record %+v applied", bad)
		}
	}
	if _, err := b.ModuleBytes("../state.json"); err == nil {
		t.Fatal("ModuleBytes served a path that is not a digest")
	}
}
