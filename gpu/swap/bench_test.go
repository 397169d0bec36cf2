package swap

import (
	"math/rand/v2"
	"testing"

	"github.com/kvmesh/kvmesh/gpu/layout"
)

// benchLayout is the realistic shape (8 MiB per block, K+V); the
// cache holds 96 blocks so 64 shuffled ids spread over it.
var benchLayout = layout.Layout{Layers: 32, Blocks: 96, Heads: 8, BlockTokens: 64, HeadDim: 128, ElemBytes: 2}

const benchBatch = 64

func benchSwap(b *testing.B, dir Direction, contiguous bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := newCache(b, rng, benchLayout, 0)
	staging := make([]byte, benchBatch*benchLayout.SlotBytes())
	blocks := rng.Perm(benchLayout.Blocks)[:benchBatch]
	slots := rng.Perm(benchBatch)
	if contiguous {
		for i := range slots {
			slots[i] = i
		}
	}
	op := c.plan.Gather
	if dir == Scatter {
		op = c.plan.Scatter
	}
	if err := op(staging, blocks, slots); err != nil { // faults the pages in
		b.Fatal(err)
	}
	b.SetBytes(int64(len(staging)))
	b.ResetTimer()
	for range b.N {
		if err := op(staging, blocks, slots); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGatherContiguousSlots(b *testing.B)  { benchSwap(b, Gather, true) }
func BenchmarkGatherShuffledSlots(b *testing.B)    { benchSwap(b, Gather, false) }
func BenchmarkScatterContiguousSlots(b *testing.B) { benchSwap(b, Scatter, true) }
func BenchmarkScatterShuffledSlots(b *testing.B)   { benchSwap(b, Scatter, false) }

func BenchmarkMemcpy(b *testing.B) {
	n := benchBatch * benchLayout.SlotBytes()
	src, dst := make([]byte, n), make([]byte, n)
	Memcpy(dst, src)
	b.SetBytes(int64(n))
	b.ResetTimer()
	for range b.N {
		Memcpy(dst, src)
	}
}
