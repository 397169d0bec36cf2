//go:build cuda

package cuda

/*
#include "kvswap_cuda.h"
*/
import "C"

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvmesh/kvmesh/gpu/layout"
)

// BenchSwap times, on device 0, a gather (D2H) and a scatter (H2D) of
// `blocks` shuffled blocks of layout l into contiguous pinned slots, and one
// contiguous pinned cudaMemcpy of the same byte count each way: the median of
// reps rounds after a warm-up, in GB/s.
func BenchSwap(l layout.Layout, blocks, reps int) (map[string]float64, error) {
	l.Blocks = blocks + blocks/2
	c, err := NewDeviceCache(0, l)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if code := C.kvc_cache_fill(c.c, 7); code != 0 {
		return nil, cudaErr("filling cache", code)
	}
	s, err := c.NewStaging(blocks, blocks)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	ids := rand.New(rand.NewPCG(1, 2)).Perm(l.Blocks)[:blocks]
	slots := make([]int, blocks)
	for i := range slots {
		slots[i] = i
	}
	bytes := float64(blocks * l.SlotBytes())

	median := func(secs []float64) float64 { slices.Sort(secs); return bytes / secs[len(secs)/2] / 1e9 }
	timeOp := func(op func() error) (float64, error) {
		var secs []float64
		for i := range reps + 1 {
			start := time.Now()
			if err := op(); err != nil {
				return 0, err
			}
			if i > 0 {
				secs = append(secs, time.Since(start).Seconds())
			}
		}
		return median(secs), nil
	}
	timeMemcpy := func(toHost C.int) (float64, error) {
		var secs []float64
		for i := range reps + 1 {
			var ms C.float
			if code := C.kvc_bench_memcpy(s.s, toHost, C.uint64_t(bytes), &ms); code != 0 {
				return 0, cudaErr("memcpy", code)
			}
			if i > 0 {
				secs = append(secs, float64(ms)/1e3)
			}
		}
		return median(secs), nil
	}
	res := map[string]float64{}
	if res["d2h_gbps"], err = timeOp(func() error { return c.Gather(s, ids, slots) }); err != nil {
		return nil, err
	}
	if res["h2d_gbps"], err = timeOp(func() error { return c.Scatter(s, ids, slots) }); err != nil {
		return nil, err
	}
	if res["memcpy_d2h_gbps"], err = timeMemcpy(1); err != nil {
		return nil, err
	}
	if res["memcpy_h2d_gbps"], err = timeMemcpy(0); err != nil {
		return nil, err
	}
	return res, nil
}
