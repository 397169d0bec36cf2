package store

import (
	"fmt"
	"testing"

	"github.com/kvmesh/kvmesh/policy"
)

// recorder is an eviction, admission and prefetch policy that records
// every event it is given and otherwise behaves as the native ones.
type recorder struct {
	*policy.LRU
	events []policy.Event
}

func newRecorder() *recorder { return &recorder{LRU: policy.NewLRU()} }

func (r *recorder) Observe(evs []policy.Event) {
	r.events = append(r.events, evs...)
	r.LRU.Observe(evs)
}

func (r *recorder) Admit(inserts []policy.Event, dst []policy.Decision) []policy.Decision {
	r.events = append(r.events, inserts...)
	return policy.WriteBack{}.Admit(inserts, dst)
}

func (r *recorder) Prefetch(lookup []policy.Event, dst []uint64) []uint64 {
	r.events = append(r.events, lookup...)
	return dst
}

// last is the last recorded event of the kind, failing if there is none.
func (r *recorder) last(t *testing.T, kind policy.EventKind) policy.Event {
	t.Helper()
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].Kind == kind {
			return r.events[i]
		}
	}
	t.Fatalf("no %v event among %d", kind, len(r.events))
	return policy.Event{}
}

// flushed hands the events the store has batched to its eviction policies.
func flushed(s *Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flush(policy.TierMemory)
	s.flush(policy.TierDisk)
}

// idOf is the id the store gives key now (0: neither held nor remembered).
func idOf(s *Store, key string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.knownID(indexKey("default", []byte(key)))
}

// A block evicted and put again keeps its id in what the policies see, and
// a lookup's or a read's miss of it in between names that id.
func TestEvictedBlockComesBackUnderItsID(t *testing.T) {
	t.Parallel()
	s := newStore(t, 32*kib, 0, "")
	mem, adm, pre := newRecorder(), newRecorder(), newRecorder()
	s.SetEviction(policy.TierMemory, mem)
	s.SetAdmission(adm)
	s.SetPrefetch(pre)

	mustPut(t, s, "k", value(1, 16*kib), policy.DurableMemory)
	id := adm.last(t, policy.EventInsert).ID
	flushed(s)
	if id == 0 || mem.last(t, policy.EventInsert).ID != id {
		t.Fatalf("insert ids: admission %d, eviction %d", id, mem.last(t, policy.EventInsert).ID)
	}
	for i := range 2 { // 32 KiB holds two blocks: k goes
		mustPut(t, s, fmt.Sprint("filler", i), value(i, 16*kib), policy.DurableMemory)
	}
	flushed(s)
	if rm := mem.last(t, policy.EventRemove); rm.ID != id {
		t.Fatalf("evicted block %d, want k's %d", rm.ID, id)
	}
	if idOf(s, "filler0") == id || idOf(s, "filler1") == id {
		t.Fatal("another key took k's id")
	}

	if n, _ := s.Query("", [][]byte{[]byte("k")}); n != 0 {
		t.Fatal("k still stored")
	}
	if miss := pre.last(t, policy.EventMiss); miss.ID != id {
		t.Fatalf("lookup miss of k carries id %d, want %d", miss.ID, id)
	}
	if _, err := s.Get("", []byte("k"), [][]byte{make([]byte, 16*kib)}); !IsNotFound(err) {
		t.Fatalf("Get k: %v", err)
	}
	flushed(s)
	if miss := mem.last(t, policy.EventMiss); miss.ID != id {
		t.Fatalf("read miss of k carries id %d, want %d", miss.ID, id)
	}

	mustPut(t, s, "k", value(2, 16*kib), policy.DurableMemory)
	if got := adm.last(t, policy.EventInsert).ID; got != id {
		t.Fatalf("k put again: admission sees id %d, want %d", got, id)
	}
	flushed(s)
	if got := mem.last(t, policy.EventInsert).ID; got != id {
		t.Fatalf("k put again: eviction sees id %d, want %d", got, id)
	}
	mustGet(t, s, "k", value(2, 16*kib))
}

// A replace keeps the id but writes a new file version (crash safety:
// recovery keeps the newest version of a key).
func TestReplaceKeepsTheIDNotTheVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newStore(t, 1<<20, 1<<20, dir)
	mustPut(t, s, "k", value(1, 5000), policy.DurableDisk)
	s.mu.Lock()
	first := *s.blocks[indexKey("default", []byte("k"))]
	s.mu.Unlock()
	mustPut(t, s, "k", value(2, 7000), policy.DurableDisk)
	s.mu.Lock()
	second := *s.blocks[indexKey("default", []byte("k"))]
	s.mu.Unlock()
	if second.id != first.id || second.version <= first.version {
		t.Fatalf("replace: id %d→%d, version %d→%d; want the id kept and a newer version",
			first.id, second.id, first.version, second.version)
	}
	s.Close()
	s2 := newStore(t, 1<<20, 1<<20, dir)
	mustGet(t, s2, "k", value(2, 7000))
}

// A key a lookup missed keeps the id the miss named when it is then put,
// and a chain's parent id names the parent even after it left.
func TestMissNamesTheBlockPutNext(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1<<20, 0, "")
	pre, adm := newRecorder(), newRecorder()
	s.SetPrefetch(pre)
	s.SetAdmission(adm)
	if n, _ := s.Query("", [][]byte{[]byte("new")}); n != 0 {
		t.Fatal("found a key never put")
	}
	miss := pre.last(t, policy.EventMiss)
	if miss.ID == 0 {
		t.Fatal("a miss of a key never seen has id 0")
	}
	mustPut(t, s, "new", value(1, 100), policy.DurableMemory)
	if got := adm.last(t, policy.EventInsert).ID; got != miss.ID {
		t.Fatalf("put after the miss: id %d, the miss named %d", got, miss.ID)
	}
	s.Remove("", []byte("new"))
	if err := s.Put("", []byte("child"), [][]byte{value(2, 100)}, PutOptions{Parent: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	if got := adm.last(t, policy.EventInsert).Parent; got != miss.ID {
		t.Fatalf("parent id %d, want the removed parent's %d", got, miss.ID)
	}
}

// The ghost table is bounded, forgets the least recently seen keys first,
// and an id is never handed to a second key.
func TestRememberedKeysStayBounded(t *testing.T) {
	t.Parallel()
	s, err := New(Config{MemCapacity: 32 * kib, MaxBlockSize: 1 << 20, RememberedKeys: 8, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	adm := newRecorder()
	s.SetAdmission(adm)
	keyOf := map[uint64]string{}
	idOfKey := map[string]uint64{}
	put := func(k string) {
		t.Helper()
		mustPut(t, s, k, value(len(k), 16*kib), policy.DurableMemory)
		id := adm.last(t, policy.EventInsert).ID
		if other, ok := keyOf[id]; ok && other != k {
			t.Fatalf("id %d names %q and %q", id, other, k)
		}
		keyOf[id] = k
		idOfKey[k] = id
	}
	for i := range 100 {
		put(fmt.Sprint("k", i))
		if n := s.rememberedKeys(); n > 8 {
			t.Fatalf("%d keys remembered, limit 8", n)
		}
	}
	// Two blocks stored; the 8 keys evicted last are remembered.
	first := idOfKey["k0"]
	put("k0") // forgotten long ago: a new id
	if idOfKey["k0"] == first {
		t.Fatal("a forgotten key got its old id back")
	}
	recent := idOfKey["k97"] // evicted by the last two puts
	put("k97")
	if idOfKey["k97"] != recent {
		t.Fatalf("a remembered key came back as %d, was %d", idOfKey["k97"], recent)
	}

	// The default bound: MinGhosts for a small store, however many keys
	// lookups miss.
	d := newStore(t, 1<<20, 0, "")
	for i := range MinGhosts + 500 {
		d.Query("", [][]byte{[]byte(fmt.Sprint("miss", i))})
	}
	if n := d.rememberedKeys(); n != MinGhosts {
		t.Fatalf("%d keys remembered, want the floor %d", n, MinGhosts)
	}
	// Negative: no key is remembered and misses carry id 0.
	off, err := New(Config{MemCapacity: 32 * kib, RememberedKeys: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	pre := newRecorder()
	off.SetPrefetch(pre)
	off.Query("", [][]byte{[]byte("x")})
	if n := off.rememberedKeys(); n != 0 || pre.last(t, policy.EventMiss).ID != 0 {
		t.Fatalf("remembering off: %d keys, miss id %d", n, pre.last(t, policy.EventMiss).ID)
	}
}
