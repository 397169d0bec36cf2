package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/kvmesh/kvmesh/gpu/cuda"
	"github.com/kvmesh/kvmesh/gpu/layout"
	"github.com/kvmesh/kvmesh/gpu/swap"
)

// swapBenchLayout is the realistic shape of the issue: a 32-layer model with
// 8 KV heads of 128 dims in fp16, 64-token pages: 8 MiB per block (K+V).
var swapBenchLayout = layout.Layout{Layers: 32, Heads: 8, BlockTokens: 64, HeadDim: 128, ElemBytes: 2}

// benchSwap measures the host swap core against a plain memcpy of the same
// byte count, in one run on the same buffers: gather (cache → block-major
// staging, a save) and scatter (staging → cache, a load) of shuffled block ids
// into contiguous slots. Each figure is the median of --reps timed rounds after
// one warm-up round that faults every page in. Built with -tags cuda on a
// machine with a GPU it also times D2H/H2D against a pinned cudaMemcpy.
func benchSwap(args []string) error {
	fs := flag.NewFlagSet("bench swap", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object")
	nblocks := fs.Int("blocks", 64, "blocks per batch")
	reps := fs.Int("reps", 5, "timed rounds per figure (median reported)")
	threads := fs.Int("threads", 0, "swap threads (0: GOMAXPROCS, at most 16)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nblocks <= 0 || *reps <= 0 {
		return fmt.Errorf("--blocks and --reps must be > 0")
	}
	l := swapBenchLayout
	l.Blocks = *nblocks + *nblocks/2 // room to shuffle ids over a larger cache
	if err := l.Validate(); err != nil {
		return err
	}
	var regions []swap.Region
	for _, r := range l.Regions() {
		mem := make([]byte, l.RegionBytesOf(r.Kind))
		for i := range mem {
			mem[i] = byte(i*7 + r.Layer)
		}
		regions = append(regions, swap.Region{Mem: mem, Chunk: r.Chunk, SlotOffset: r.SlotOffset})
	}
	plan, err := swap.NewPlan(regions, l.SlotBytes(), *threads)
	if err != nil {
		return err
	}
	n := *nblocks
	bytes := n * l.SlotBytes()
	staging := make([]byte, bytes)
	memcpySrc := make([]byte, bytes)
	for i := range memcpySrc {
		memcpySrc[i] = byte(i)
	}
	blocks := rand.New(rand.NewPCG(1, 2)).Perm(l.Blocks)[:n]
	slots := make([]int, n)
	for i := range slots {
		slots[i] = i
	}

	timed := func(op func() error) (float64, error) {
		var secs []float64
		for i := range *reps + 1 {
			start := time.Now()
			if err := op(); err != nil {
				return 0, err
			}
			if i > 0 { // round 0 faults the pages in
				secs = append(secs, time.Since(start).Seconds())
			}
		}
		slices.Sort(secs)
		return float64(bytes) / secs[len(secs)/2] / 1e9, nil
	}
	res := map[string]any{"blocks": n, "bytes": bytes, "block_bytes": l.SlotBytes()}
	if res["memcpy_gbps"], err = timed(func() error { swap.Memcpy(staging, memcpySrc); return nil }); err != nil {
		return err
	}
	if res["gather_gbps"], err = timed(func() error { return plan.Gather(staging, blocks, slots) }); err != nil {
		return err
	}
	if res["scatter_gbps"], err = timed(func() error { return plan.Scatter(staging, blocks, slots) }); err != nil {
		return err
	}
	if dev, err := cuda.BenchSwap(swapBenchLayout, n, *reps); err == nil {
		for k, v := range dev {
			res[k] = v
		}
	} else if !errors.Is(err, cuda.ErrUnavailable) {
		return fmt.Errorf("cuda swap: %w", err)
	}

	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	keys := make([]string, 0, len(res))
	for k := range res {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("%-22s %v\n", k, res[k])
	}
	return nil
}
