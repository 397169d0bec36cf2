package main

import (
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/policy/replay"
	"github.com/kvmesh/kvmesh/wasm-policies/internal/native"
)

// request admits the new blocks of one request as the replay lab and a
// store hand them over: a chain from position first, each block the child
// of the one before, the first the child of parent; the last block holds
// tail tokens.
func request(t *testing.T, a policy.Admission, now time.Duration, parent uint64, first uint32, ids []uint64, tail uint32) []policy.DiskWrite {
	t.Helper()
	var in []policy.Event
	for i, id := range ids {
		e := policy.Event{Time: int64(now), ID: id, Parent: parent, Size: 512, Tokens: 512, ChainPos: first + uint32(i), Kind: policy.EventInsert}
		if i == len(ids)-1 {
			e.Tokens, e.Size = tail, uint64(tail)
		}
		in = append(in, e)
		parent = id
	}
	d := a.Admit(in, nil)
	if len(d) != len(in) {
		t.Fatalf("%d decisions for %d records", len(d), len(in))
	}
	out := make([]policy.DiskWrite, len(d))
	for i, x := range d {
		if x.Disk > policy.DiskNever || x.Replicas != 0 || x.Ack != policy.DurableMemory {
			t.Fatalf("decision %+v", x)
		}
		out[i] = x.Disk
	}
	return out
}

func seq(from, n uint64) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = from + uint64(i)
	}
	return ids
}

// TestBeforeEvidence: a fresh policy writes full blocks back and keeps
// partial last blocks in memory, until a partial block is admitted again:
// the second sighting earns it the disk.
func TestBeforeEvidence(t *testing.T) {
	a := native.Admission(newSighting())
	got := request(t, a, time.Second, 1, 1, []uint64{10, 11, 12}, 100)
	want := []policy.DiskWrite{policy.DiskOnEvict, policy.DiskOnEvict, policy.DiskNever}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("first request: %v, want %v", got, want)
		}
	}
	// The same chain missed after leaving the store: all three come again.
	got = request(t, a, time.Minute, 1, 1, []uint64{10, 11, 12}, 100)
	for _, d := range got {
		if d != policy.DiskOnEvict {
			t.Fatalf("second sighting: %v, want all written back", got)
		}
	}
}

// TestLearnsWhichRunsComeBack: two kinds of request arrive, one a second
// each. First turns (after a one-block system prompt) get a second turn a
// minute later half the time; long-history requests (chain position 40 on)
// are never continued. Once the policy has watched for a while it skips the
// tails of the never-continued requests and every partial block, and keeps
// writing the first turns' full blocks: skipping those would lose far more
// than its budget.
func TestLearnsWhichRunsComeBack(t *testing.T) {
	a := native.Admission(newSighting())
	const system = 1
	request(t, a, 0, 0, 0, []uint64{system}, 512)
	next := uint64(100)
	type pending struct {
		at   time.Duration
		last uint64
	}
	var follow []pending
	var firstFull, longFull, partial [2]int // written, skipped, over the last 10 minutes
	const minutes = 60
	for s := 1; s <= minutes*60; s++ {
		now := time.Duration(s) * time.Second
		for len(follow) > 0 && follow[0].at <= now {
			ids := seq(next, 4)
			next += 4
			request(t, a, now, follow[0].last, 9, ids, 200)
			follow = follow[1:]
		}
		tally := func(counts *[2]int, d policy.DiskWrite) {
			if s > (minutes-10)*60 {
				if d == policy.DiskNever {
					counts[1]++
				} else {
					counts[0]++
				}
			}
		}
		if s%2 == 0 {
			ids := seq(next, 9)
			next += 9
			got := request(t, a, now, system, 1, ids, 300)
			for _, d := range got[:8] {
				tally(&firstFull, d)
			}
			tally(&partial, got[8])
			if s%4 == 0 {
				follow = append(follow, pending{now + time.Minute, ids[7]})
			}
		} else {
			parent := next // a long history the policy never saw
			ids := seq(next+1, 12)
			next += 13
			got := request(t, a, now, parent, 40, ids, 300)
			for _, d := range got[:11] {
				tally(&longFull, d)
			}
			tally(&partial, got[11])
		}
	}
	t.Logf("last 10 minutes, written/skipped: first turns %v, long histories %v, partial %v", firstFull, longFull, partial)
	if firstFull[1] != 0 {
		t.Errorf("skipped %d full blocks of first turns, half of which come back", firstFull[1])
	}
	if longFull[1] < longFull[0] {
		t.Errorf("long histories: %d written, %d skipped: want most skipped", longFull[0], longFull[1])
	}
	if partial[0] != 0 {
		t.Errorf("wrote %d partial blocks", partial[0])
	}
}

// TestSkipsFromTheTail: when some of a run is skipped, it is a tail. A
// lookup stops at the first missing block, so a block written behind a
// skipped one could never be hit on disk.
func TestSkipsFromTheTail(t *testing.T) {
	p := newSighting()
	a := native.Admission(p)
	// Teach it that the runs of chain-position class 1 are reused up to
	// offset 7 (offset classes 0 to 3) and never beyond.
	for i := range 4 {
		p.runsIn[1*offClasses+i] = 1000
		p.admitted[1*offClasses+i] = 1000
		p.reused[1*offClasses+i] = 500
	}
	for i := 4; i < offClasses; i++ {
		p.runsIn[1*offClasses+i] = 1000
		p.admitted[1*offClasses+i] = 1000
	}
	p.plan()
	got := request(t, a, time.Second, 1, 1, seq(10, 20), 512)
	for i, d := range got {
		if want := i >= 8; (d == policy.DiskNever) != want {
			t.Fatalf("offset %d: %v (all: %v)", i, d, got)
		}
	}
	// Were the plan to change mid-run, a later block stays skipped.
	p.skip = [classes]bool{}
	got = request(t, a, time.Second, 0, 40, seq(100, 3), 512)
	if got[0] != policy.DiskOnEvict {
		t.Fatalf("no class skipped: %v", got)
	}
}

// TestWithinAPointOnSyntheticConversations replays two tiers over
// synthetic traces unlike the conversation trace (few or many follow-ups,
// quick or slow turns): against writing every block through, the policy
// must write fewer blocks and lose at most a point of hit rate. The real
// trace is replayed through the wasm module in policy/replay's tests.
func TestWithinAPointOnSyntheticConversations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  replay.SyntheticConfig
	}{
		{"few follow-ups, slow turns", replay.SyntheticConfig{Seed: 3, Duration: time.Hour, Rate: 3, SystemPrompts: 8, PromptBlocks: 4, NewBlocks: 8, Continue: 0.1, MedianGap: 3 * time.Minute}},
		{"many follow-ups, quick turns", replay.SyntheticConfig{Seed: 2, Duration: 40 * time.Minute, Rate: 4, SystemPrompts: 20, PromptBlocks: 6, NewBlocks: 6, Continue: 0.5, MedianGap: 40 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			trace := replay.Synthetic(tc.cfg)
			cfg := replay.Config{CapacityTokens: 1_000_000, DiskCapacityTokens: 10_000_000,
				Eviction: func(policy.Tier) (policy.Eviction, error) { return policy.NewLRU(), nil }}
			cfg.Admission = func() (policy.Admission, error) { return writeAll(policy.DiskNow), nil }
			through, err := replay.Run(trace, cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Admission = func() (policy.Admission, error) { return native.Admission(newSighting()), nil }
			got, err := replay.Run(trace, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("sighting: hit rate %.4f, %d disk writes; write-through %.4f, %d", got.HitRate(), got.BlocksWrittenDisk, through.HitRate(), through.BlocksWrittenDisk)
			if got.BlocksWrittenDisk*20 > through.BlocksWrittenDisk*19 {
				t.Errorf("%d disk writes, write-through %d: want at least 5%% fewer", got.BlocksWrittenDisk, through.BlocksWrittenDisk)
			}
			if got.HitRate() < through.HitRate()-0.01 {
				t.Errorf("hit rate %.4f, write-through %.4f: lost more than a point", got.HitRate(), through.HitRate())
			}
		})
	}
}

type writeAll policy.DiskWrite

func (w writeAll) Admit(in []policy.Event, dst []policy.Decision) []policy.Decision {
	for range in {
		dst = append(dst, policy.Decision{Disk: policy.DiskWrite(w)})
	}
	return dst
}
