package sdk

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestEventLayout checks Event against the record layout of
// docs/policy-abi.md, byte for byte.
func TestEventLayout(t *testing.T) {
	if n := unsafe.Sizeof(Event{}); n != eventSize {
		t.Fatalf("Event is %d bytes, the ABI's record %d", n, eventSize)
	}
	Buffer(2)
	rec := unsafe.Slice((*byte)(unsafe.Pointer(&exchange[1])), eventSize)
	binary.LittleEndian.PutUint64(rec[0:], uint64(1_700_000_000_123456789))
	binary.LittleEndian.PutUint64(rec[8:], 42)
	binary.LittleEndian.PutUint64(rec[16:], 41)
	binary.LittleEndian.PutUint64(rec[24:], 1<<21)
	binary.LittleEndian.PutUint32(rec[32:], 512)
	binary.LittleEndian.PutUint32(rec[36:], 7)
	rec[40], rec[41] = byte(Demote), byte(TierDisk)
	got := Events(2)[1]
	want := Event{Time: 1_700_000_000_123456789, ID: 42, Parent: 41, Size: 1 << 21, Tokens: 512, ChainPos: 7, Kind: Demote, Tier: TierDisk}
	if got != want {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	if n := unsafe.Sizeof(Decision{}); n != decisionSize {
		t.Fatalf("Decision is %d bytes, the ABI's record %d", n, decisionSize)
	}
}

type recorder struct {
	seen     []Event
	victims  []uint64
	decision Decision
}

func (r *recorder) Observe(events []Event) { r.seen = append(r.seen, events...) }
func (r *recorder) Victims(dst []uint64, max int) []uint64 {
	return append(dst, r.victims[:min(max, len(r.victims))]...)
}
func (r *recorder) Admit(inserts []Event, dst []Decision) []Decision {
	for range inserts {
		dst = append(dst, r.decision)
	}
	return dst
}
func (r *recorder) Prefetch(lookup []Event, dst []uint64) []uint64 {
	for _, e := range lookup {
		dst = append(dst, e.ID*10)
	}
	return dst
}

func TestHandlers(t *testing.T) {
	if Buffer(0) != -1 {
		t.Fatal("a buffer of no records was handed out")
	}
	Buffer(4)
	for i := range exchange {
		exchange[i] = Event{ID: uint64(i + 1), Kind: Insert}
	}
	r := &recorder{victims: []uint64{9, 8, 7}, decision: Decision{Disk: DiskNever, Replicas: 2, Ack: DurableReplicated}}

	if HandleObserve(r, 3) != 0 || len(r.seen) != 3 || r.seen[2].ID != 3 {
		t.Fatalf("observe handed %v", r.seen)
	}
	if HandleObserve(r, 5) != -1 {
		t.Fatal("observe accepted more records than the buffer holds")
	}
	ids := unsafe.Slice((*uint64)(unsafe.Pointer(&exchange[0])), 2)
	if n := HandleVictims(r, 2); n != 2 || ids[0] != 9 || ids[1] != 8 {
		t.Fatalf("victims: %d %v", n, ids)
	}

	for i := range exchange {
		exchange[i] = Event{ID: uint64(i + 1), Kind: Insert}
	}
	if n := HandlePrefetch(r, 4); n != 4 || unsafe.Slice((*uint64)(unsafe.Pointer(&exchange[0])), 4)[3] != 40 {
		t.Fatalf("prefetch answered %d", n)
	}
	if n := HandleAdmit(r, 3); n != 3 {
		t.Fatalf("admit answered %d", n)
	}
	rec := unsafe.Slice((*byte)(unsafe.Pointer(&exchange[0])), 12)
	for i := range 3 {
		if got := rec[4*i : 4*i+4]; got[0] != byte(DiskNever) || got[1] != 2 || got[2] != byte(DurableReplicated) || got[3] != 0 {
			t.Fatalf("decision %d encoded as %v", i, got)
		}
	}
	r.victims = make([]uint64, 100)
	if n := HandleVictims(r, 100); n != -1 {
		t.Fatalf("%d victims for a buffer of 24 ids, want -1", n)
	}
}

func TestIDTableAgreesWithMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tab := NewIDTable(4)
	ref := map[uint64]int32{}
	for i := range 200_000 {
		id := 1 + rng.Uint64N(3000)
		switch rng.IntN(3) {
		case 0, 1:
			tab.Put(id, int32(i))
			ref[id] = int32(i)
		case 2:
			tab.Delete(id)
			delete(ref, id)
		}
		if i%1000 == 0 {
			for probe := uint64(0); probe <= 3000; probe++ {
				got, ok := tab.Get(probe)
				want, wantOK := ref[probe]
				if ok != wantOK || got != want {
					t.Fatalf("after %d operations Get(%d) = %d,%v; want %d,%v", i, probe, got, ok, want, wantOK)
				}
			}
			if tab.Len() != len(ref) {
				t.Fatalf("Len %d, want %d", tab.Len(), len(ref))
			}
		}
	}
}
