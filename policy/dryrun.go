package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// dryRunBudget bounds a whole dry run; each call also has its deadline.
const dryRunBudget = 5 * time.Second

// DryRun binds every slot the module implements to fresh instances and
// drives them with a deterministic synthetic workload (multi-turn
// conversations sharing a system prompt, in a store of 256 blocks). It
// fails if any call traps, overruns its deadline, runs out of memory or
// answers nonsense, or if the run as a whole takes longer than 5s.
func (m *Module) DryRun(ctx context.Context) error {
	type bound interface {
		Err() error
		Close()
	}
	var bindings []bound
	var slots []Slot
	defer func() {
		for _, b := range bindings {
			b.Close()
		}
	}()
	store := newSyntheticStore(256)
	feed := &TelemetryFeed{}
	var evict Eviction = NewLRU()
	var admit Admission
	var prefetch Prefetch
	for _, slot := range m.Slots() {
		var b bound
		var err error
		switch slot {
		case SlotEviction:
			var w *WasmEviction
			w, err = m.NewEviction(ctx, TierMemory, BindConfig{Telemetry: feed})
			evict, b = w, w
		case SlotAdmission:
			var w *WasmAdmission
			w, err = m.NewAdmission(ctx, BindConfig{Telemetry: feed})
			admit, b = w, w
		case SlotPrefetch:
			var w *WasmPrefetch
			w, err = m.NewPrefetch(ctx, BindConfig{Telemetry: feed})
			prefetch, b = w, w
		}
		if err != nil {
			return fmt.Errorf("dry run of the %s slot: %w", slot, err)
		}
		bindings, slots = append(bindings, b), append(slots, slot)
	}
	failed := func() error {
		var errs []error
		for i, b := range bindings {
			if err := b.Err(); err != nil {
				errs = append(errs, fmt.Errorf("dry run of the %s slot: %w", slots[i], err))
			}
		}
		return errors.Join(errs...)
	}
	deadline := time.Now().Add(dryRunBudget)
	for i := range 600 {
		if time.Now().After(deadline) {
			return fmt.Errorf("dry run took longer than %v", dryRunBudget)
		}
		if i%50 == 0 {
			feed.Publish(syntheticReadings(store.now, i))
		}
		store.request(evict, admit, prefetch)
		if err := failed(); err != nil {
			return err
		}
	}
	return nil
}

// syntheticStore is a toy two-tier store fed by multi-turn conversations;
// it produces the event stream of a dry run.
type syntheticStore struct {
	rng       *rand.Rand
	capacity  int
	memory    map[uint64]bool
	disk      map[uint64]bool
	convs     [][]uint64 // token chains of open conversations
	nextID    uint64
	now       int64
	victims   []uint64
	decisions []Decision
	warm      []uint64
}

func newSyntheticStore(capacity int) *syntheticStore {
	return &syntheticStore{
		rng:      rand.New(rand.NewPCG(1, 2)),
		capacity: capacity,
		memory:   map[uint64]bool{},
		disk:     map[uint64]bool{},
		nextID:   2, // block 1 is the shared system prompt
		now:      time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(),
	}
}

// request runs one request through the policies; admit and prefetch may
// be nil.
func (s *syntheticStore) request(evict Eviction, admit Admission, prefetch Prefetch) {
	s.now += int64(s.rng.IntN(3000)) * int64(time.Millisecond)
	var chain []uint64
	if c := len(s.convs); c > 0 && s.rng.IntN(3) > 0 {
		i := s.rng.IntN(c)
		chain = s.convs[i]
		s.convs[i] = s.convs[c-1]
		s.convs = s.convs[:c-1]
	} else {
		chain = []uint64{1}
	}
	for range 1 + s.rng.IntN(12) {
		chain = append(chain, s.nextID)
		s.nextID++
	}
	if s.rng.IntN(4) > 0 {
		s.convs = append(s.convs, chain)
	}

	var lookup, inserts []Event
	prefix := true
	for pos, id := range chain {
		e := Event{Time: s.now, ID: id, Size: 1 << 20, Tokens: 512, ChainPos: uint32(pos)}
		if pos > 0 {
			e.Parent = chain[pos-1]
		}
		if pos == len(chain)-1 {
			e.Tokens = uint32(1 + s.rng.IntN(512))
		}
		switch {
		case prefix && s.memory[id]:
			e.Kind, e.Tier = EventHit, TierMemory
		case prefix && s.disk[id]:
			e.Kind, e.Tier = EventHit, TierDisk
		default:
			prefix = false
			e.Kind = EventMiss
			if !s.disk[id] {
				e.ID = 0 // never stored: the store has no id for it yet
			}
		}
		lookup = append(lookup, e)
		if !s.memory[id] {
			e.ID, e.Kind, e.Tier = id, EventInsert, TierMemory
			inserts = append(inserts, e)
		}
	}
	if prefetch != nil {
		s.warm = prefetch.Prefetch(lookup, s.warm[:0])
	}
	evict.Observe(lookup)
	if over := len(s.memory) + len(inserts) - s.capacity; over > 0 {
		s.victims = evict.Victims(s.victims[:0], over)
		gone := make([]Event, 0, len(s.victims))
		for _, id := range s.victims {
			if s.memory[id] {
				delete(s.memory, id)
				s.disk[id] = true
				gone = append(gone, Event{Time: s.now, ID: id, Kind: EventDemote, Tier: TierMemory})
			}
		}
		evict.Observe(gone)
	}
	if admit != nil {
		s.decisions = admit.Admit(inserts, s.decisions[:0])
	}
	for _, e := range inserts {
		s.memory[e.ID] = true
	}
	evict.Observe(inserts)
}

// syntheticReadings is a two-GPU telemetry sample for a dry run: memory
// filling up and PCIe traffic that varies with step.
func syntheticReadings(now int64, step int) []Reading {
	const total = 80 << 30
	used := uint64(step%600) * (total / 600)
	return []Reading{
		{Time: now, Device: 0, MemoryUsed: used, MemoryTotal: total, PCIeTxBytesPerSec: int64(step) << 20, PCIeRxBytesPerSec: int64(600-step) << 20},
		{Time: now, Device: 1, MemoryUsed: total - used, MemoryTotal: total, PCIeTxBytesPerSec: -1, PCIeRxBytesPerSec: -1},
	}
}
