package swap

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/kvmesh/kvmesh/gpu/layout"
)

// cache is a layer-major cache in Go memory plus the plan over it.
type cache struct {
	plan    *Plan
	regions []Region
}

func newCache(t testing.TB, rng *rand.Rand, l layout.Layout, threads int) cache {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	var regions []Region
	for _, r := range l.Regions() {
		mem := make([]byte, l.RegionBytesOf(r.Kind))
		fill(rng, mem)
		regions = append(regions, Region{Mem: mem, Chunk: r.Chunk, SlotOffset: r.SlotOffset})
	}
	p, err := NewPlan(regions, l.SlotBytes(), threads)
	if err != nil {
		t.Fatal(err)
	}
	return cache{plan: p, regions: regions}
}

func fill(rng *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
}

func refGather(regions []Region, slotBytes int, staging []byte, blocks, slots []int) {
	for i := range blocks {
		for _, r := range regions {
			copy(staging[slots[i]*slotBytes+r.SlotOffset:][:r.Chunk], r.Mem[blocks[i]*r.Chunk:][:r.Chunk])
		}
	}
}

func refScatter(regions []Region, slotBytes int, staging []byte, blocks, slots []int) {
	for i := range blocks {
		for _, r := range regions {
			copy(r.Mem[blocks[i]*r.Chunk:][:r.Chunk], staging[slots[i]*slotBytes+r.SlotOffset:][:r.Chunk])
		}
	}
}

func cloneRegions(rs []Region) []Region {
	out := make([]Region, len(rs))
	for i, r := range rs {
		out[i] = r
		out[i].Mem = bytes.Clone(r.Mem)
	}
	return out
}

func TestGatherScatterMatchReference(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		layout     layout.Layout
		n          int  // entries in the batch
		extraSlots int  // staging slots no entry touches (must stay as they were)
		contiguous bool // slots[i] = base+i
		threads    int
	}{
		{"fp16 tiny", layout.Layout{Layers: 1, Blocks: 4, Heads: 1, BlockTokens: 1, HeadDim: 1, ElemBytes: 2}, 3, 1, false, 1},
		{"fp8 odd bytes", layout.Layout{Layers: 3, Blocks: 9, Heads: 3, BlockTokens: 5, HeadDim: 7, ElemBytes: 1}, 7, 2, false, 2},
		{"fp8 odd bytes contiguous", layout.Layout{Layers: 3, Blocks: 9, Heads: 3, BlockTokens: 5, HeadDim: 7, ElemBytes: 1}, 7, 2, true, 2},
		{"fp8 with odd scale planes", layout.Layout{Layers: 4, Blocks: 6, Heads: 2, BlockTokens: 3, HeadDim: 17, ElemBytes: 1, ScaleBytes: 13}, 5, 1, false, 1},
		{"fp16 with scale planes contiguous", layout.Layout{Layers: 2, Blocks: 8, Heads: 2, BlockTokens: 16, HeadDim: 64, ElemBytes: 2, ScaleBytes: 64}, 8, 0, true, 1},
		// Large enough to start threads and streaming stores (> StreamBytes moved).
		{"multithreaded fp16", layout.Layout{Layers: 4, Blocks: 40, Heads: 4, BlockTokens: 16, HeadDim: 128, ElemBytes: 2}, 24, 3, false, 4},
		{"multithreaded fp16 contiguous", layout.Layout{Layers: 4, Blocks: 40, Heads: 4, BlockTokens: 16, HeadDim: 128, ElemBytes: 2}, 24, 3, true, 3},
		{"multithreaded fp8 odd", layout.Layout{Layers: 5, Blocks: 33, Heads: 3, BlockTokens: 61, HeadDim: 127, ElemBytes: 1, ScaleBytes: 3}, 31, 2, false, 4},
		// One entry whose chunks exceed a C work piece: split across threads.
		{"huge chunk single entry", layout.Layout{Layers: 2, Blocks: 3, Heads: 1, BlockTokens: 3, HeadDim: 699051, ElemBytes: 1}, 1, 1, false, 4},
		{"huge chunk contiguous fewer entries than threads", layout.Layout{Layers: 1, Blocks: 3, Heads: 1, BlockTokens: 5, HeadDim: 1048577, ElemBytes: 2}, 2, 0, true, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(len(tc.name)), uint64(tc.n)))
			c := newCache(t, rng, tc.layout, tc.threads)
			sb := tc.layout.SlotBytes()
			blocks := rng.Perm(tc.layout.Blocks)[:tc.n] // shuffled, distinct
			slots := rng.Perm(tc.n + tc.extraSlots)[:tc.n]
			if tc.contiguous {
				for i := range slots {
					slots[i] = tc.extraSlots + i
				}
			}
			staging := make([]byte, (tc.n+tc.extraSlots)*sb)
			fill(rng, staging)

			want := bytes.Clone(staging)
			refGather(c.regions, sb, want, blocks, slots)
			if err := c.plan.Gather(staging, blocks, slots); err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(staging, want); i >= 0 {
				t.Fatalf("gather: staging differs from reference at byte %d (slot %d)", i, i/sb)
			}

			// Scatter fresh data back into a different set of blocks.
			fill(rng, staging)
			dst := rng.Perm(tc.layout.Blocks)[:tc.n]
			wantRegions := cloneRegions(c.regions)
			refScatter(wantRegions, sb, staging, dst, slots)
			if err := c.plan.Scatter(staging, dst, slots); err != nil {
				t.Fatal(err)
			}
			for r := range c.regions {
				if i := firstDiff(c.regions[r].Mem, wantRegions[r].Mem); i >= 0 {
					t.Fatalf("scatter: region %d differs from reference at byte %d (block %d)", r, i, i/c.regions[r].Chunk)
				}
			}
		})
	}
}

// TestRoundTripRandomShapes gathers and scatters back random shapes: what a
// save followed by a load into other block ids does.
func TestRoundTripRandomShapes(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	for iter := range 40 {
		l := layout.Layout{
			Layers: 1 + rng.IntN(6), Blocks: 2 + rng.IntN(20), Heads: 1 + rng.IntN(4),
			BlockTokens: 1 + rng.IntN(33), HeadDim: 1 + rng.IntN(130), ElemBytes: 1 + rng.IntN(2),
		}
		if rng.IntN(3) == 0 {
			l.ScaleBytes = 1 + rng.IntN(40)
		}
		c := newCache(t, rng, l, 1+rng.IntN(4))
		n := 1 + rng.IntN(l.Blocks)
		src := rng.Perm(l.Blocks)[:n]
		slots := rng.Perm(n)
		staging := make([]byte, n*l.SlotBytes())
		if err := c.plan.Gather(staging, src, slots); err != nil {
			t.Fatal(err)
		}
		dst := rng.Perm(l.Blocks)[:n]
		before := cloneRegions(c.regions)
		if err := c.plan.Scatter(staging, dst, slots); err != nil {
			t.Fatal(err)
		}
		for r, reg := range c.regions {
			for i := range n {
				got := reg.Mem[dst[i]*reg.Chunk:][:reg.Chunk]
				want := before[r].Mem[src[i]*reg.Chunk:][:reg.Chunk]
				if !bytes.Equal(got, want) {
					t.Fatalf("iter %d %+v: region %d block %d != original block %d", iter, l, r, dst[i], src[i])
				}
			}
		}
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	l := layout.Layout{Layers: 2, Blocks: 4, Heads: 1, BlockTokens: 2, HeadDim: 3, ElemBytes: 1}
	rng := rand.New(rand.NewPCG(1, 2))
	c := newCache(t, rng, l, 1)
	staging := make([]byte, 3*l.SlotBytes())
	tests := []struct {
		name    string
		scatter bool
		blocks  []int
		slots   []int
	}{
		{"block id negative", false, []int{-1}, []int{0}},
		{"block id past the cache", true, []int{4}, []int{0}},
		{"slot past the staging buffer", false, []int{0}, []int{3}},
		{"slot negative", true, []int{0}, []int{-2}},
		{"lengths differ", false, []int{0, 1}, []int{0}},
		{"gather writes one slot twice", false, []int{0, 1}, []int{2, 2}},
		{"scatter writes one block twice", true, []int{3, 1, 3}, []int{0, 1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stage := bytes.Clone(staging)
			before := cloneRegions(c.regions)
			var err error
			if tc.scatter {
				err = c.plan.Scatter(stage, tc.blocks, tc.slots)
			} else {
				err = c.plan.Gather(stage, tc.blocks, tc.slots)
			}
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("err = %v, want ErrBadRequest", err)
			}
			if !bytes.Equal(stage, staging) {
				t.Fatal("rejected request changed the staging buffer")
			}
			for r := range before {
				if !bytes.Equal(before[r].Mem, c.regions[r].Mem) {
					t.Fatal("rejected request changed the cache")
				}
			}
		})
	}
}

func TestRepeatedReadsAreAllowed(t *testing.T) {
	t.Parallel()
	l := layout.Layout{Layers: 2, Blocks: 4, Heads: 1, BlockTokens: 2, HeadDim: 3, ElemBytes: 2}
	rng := rand.New(rand.NewPCG(3, 4))
	c := newCache(t, rng, l, 1)
	staging := make([]byte, 2*l.SlotBytes())
	if err := c.plan.Gather(staging, []int{1, 1}, []int{0, 1}); err != nil {
		t.Fatalf("gather of one block into two slots: %v", err)
	}
	if err := c.plan.Scatter(staging, []int{2, 3}, []int{0, 0}); err != nil {
		t.Fatalf("scatter of one slot into two blocks: %v", err)
	}
}

func TestNewPlanRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		regions   []Region
		slotBytes int
	}{
		{"no regions", nil, 8},
		{"zero slot", []Region{{Mem: make([]byte, 8), Chunk: 4}}, 0},
		{"chunk does not divide region", []Region{{Mem: make([]byte, 10), Chunk: 4}}, 8},
		{"zero chunk", []Region{{Mem: make([]byte, 8), Chunk: 0}}, 8},
		{"block counts differ", []Region{{Mem: make([]byte, 8), Chunk: 4}, {Mem: make([]byte, 12), Chunk: 4, SlotOffset: 4}}, 8},
		{"slot range past the slot", []Region{{Mem: make([]byte, 8), Chunk: 4, SlotOffset: 5}}, 8},
		{"negative slot offset", []Region{{Mem: make([]byte, 8), Chunk: 4, SlotOffset: -1}}, 8},
		{"slot ranges overlap", []Region{{Mem: make([]byte, 8), Chunk: 4, SlotOffset: 2}, {Mem: make([]byte, 8), Chunk: 4}}, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := NewPlan(tc.regions, tc.slotBytes, 1); !errors.Is(err, ErrBadRequest) {
				t.Fatalf("err = %v, want ErrBadRequest", err)
			}
		})
	}
}

func TestMemcpy(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 255, 4097} {
		src := make([]byte, n)
		fill(rand.New(rand.NewPCG(uint64(n), 0)), src)
		dst := make([]byte, n+1)
		Memcpy(dst, src)
		if !bytes.Equal(dst[:n], src) || dst[n] != 0 {
			t.Fatalf("n=%d: copy wrong", n)
		}
	}
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}
