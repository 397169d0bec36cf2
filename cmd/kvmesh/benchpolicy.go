package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/policy/replay"
)

// policyBenchTrace is the event stream of `kvmesh bench policy`: an hour
// of synthetic conversations.
var policyBenchTrace = replay.SyntheticConfig{
	Seed: 11, Duration: time.Hour, Rate: 2, SystemPrompts: 4, PromptBlocks: 2,
	NewBlocks: 10, Continue: 0.35, MedianGap: 2 * time.Minute,
}

// benchPolicy measures what an eviction decision costs natively and as
// wasm: the agent's native LRU and the shipped lru module (run through the
// host as the store would run it: events gathered into batches, answers
// checked, the blocks of the tier recorded for the native fallback) replay
// the same trace. ns per event is the time inside the policy calls over the
// events they were handed; each figure is the median of --reps replays,
// native and wasm taking turns so that both see the same load on a busy
// machine.
func benchPolicy(args []string) error {
	fs := flag.NewFlagSet("bench policy", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object")
	module := fs.String("module", filepath.Join(defaultPolicyDir(), "lru.wasm"), "the lru policy module")
	tracePath := fs.String("trace", "", "replay this Mooncake trace instead of the synthetic one")
	capacity := fs.Int64("capacity-tokens", 2_000_000, "memory tier capacity in tokens")
	reps := fs.Int("reps", 3, "replays per figure (median reported)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the replays to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *reps <= 0 {
		return errors.New("--reps must be > 0")
	}
	trace := replay.Synthetic(policyBenchTrace)
	if *tracePath != "" {
		var err error
		if trace, err = replay.LoadTrace(*tracePath); err != nil {
			return err
		}
	}
	ctx := context.Background()
	loader, err := newPolicyLoader(ctx, defaultPolicyDir())
	if err != nil {
		return err
	}
	defer loader.close(ctx)
	wasm, err := loader.eviction(ctx, *module)
	if err != nil {
		return err
	}
	native := evictionFactory{name: "lru", make: func(policy.Tier) (policy.Eviction, error) { return policy.NewLRU(), nil }}

	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	var nres, wres replay.Result
	var nsNative, nsWasm []float64
	for range *reps {
		var err error
		if nres, err = replay.Run(trace, replay.Config{CapacityTokens: *capacity, Eviction: native.make}); err != nil {
			return err
		}
		if wres, err = replay.Run(trace, replay.Config{CapacityTokens: *capacity, Eviction: wasm.make}); err != nil {
			return err
		}
		nsNative, nsWasm = append(nsNative, nres.NsPerEvent()), append(nsWasm, wres.NsPerEvent())
	}
	median := func(ns []float64) float64 {
		slices.Sort(ns)
		return ns[len(ns)/2]
	}
	nns, wns := median(nsNative), median(nsWasm)
	if err := wasm.failures(); err != nil {
		return fmt.Errorf("the module fell back to the native policy: %w", err)
	}
	if nres.Hits != wres.Hits {
		return fmt.Errorf("the module is not LRU: %d hits, native LRU %d", wres.Hits, nres.Hits)
	}
	out := struct {
		Policy           string  `json:"policy"`
		Module           string  `json:"module"`
		Requests         int64   `json:"requests"`
		Events           int64   `json:"events"`
		HitRate          float64 `json:"hit_rate"`
		NativeNsPerEvent float64 `json:"native_ns_per_event"`
		WasmNsPerEvent   float64 `json:"wasm_ns_per_event"`
		WasmOverNative   float64 `json:"wasm_over_native"`
	}{"lru", *module, nres.Requests, nres.Events, nres.HitRate(), nns, wns, wns / nns}
	if *asJSON {
		return printJSON(out)
	}
	fmt.Printf("LRU over %d requests (%d events), hit rate %.4f\n", out.Requests, out.Events, out.HitRate)
	fmt.Printf("native %8.1f ns per event\n", nns)
	fmt.Printf("wasm   %8.1f ns per event (%.2f× native)\n", wns, wns/nns)
	return nil
}
