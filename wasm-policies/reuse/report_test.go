package main

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/internal/testenv"
	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/policy/replay"
	"github.com/kvmesh/kvmesh/wasm-policies/internal/native"
)

// TestReport prints the policy's hit rate beside LRU's and Belady's on the
// generalisation checks: the conversation trace at 1M to 10.24M tokens,
// its two halves, and synthetic traces unlike it. It runs the policy
// natively (the wasm module gives the same figures) and only when
// REUSE_REPORT is set: it is a tool, not a check.
func TestReport(t *testing.T) {
	if os.Getenv("REUSE_REPORT") == "" {
		t.Skip("REUSE_REPORT unset")
	}
	tr, err := replay.LoadTrace(testenv.Trace(t, "conversation_trace.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	mid := tr[len(tr)-1].Timestamp / 2
	var first, second []replay.Request
	for _, r := range tr {
		if r.Timestamp < mid {
			first = append(first, r)
		} else {
			second = append(second, r)
		}
	}
	type check struct {
		name  string
		trace []replay.Request
		caps  []int64
	}
	checks := []check{
		{"conversation", tr, []int64{1_000_000, 2_000_000, 3_000_000, 5_000_000, 10_240_000}},
		{"first half", first, []int64{1_500_000, 3_000_000}},
		{"second half", second, []int64{1_500_000, 3_000_000}},
	}
	for i, c := range []replay.SyntheticConfig{
		{Seed: 1, Duration: 30 * time.Minute, Rate: 2, SystemPrompts: 3, PromptBlocks: 2, NewBlocks: 12, Continue: 0.35, MedianGap: 2 * time.Minute},
		{Seed: 2, Duration: 30 * time.Minute, Rate: 4, SystemPrompts: 20, PromptBlocks: 6, NewBlocks: 6, Continue: 0.5, MedianGap: 40 * time.Second},
		{Seed: 3, Duration: 40 * time.Minute, Rate: 3, SystemPrompts: 8, PromptBlocks: 4, NewBlocks: 8, Continue: 0.4, MedianGap: time.Minute},
		{Seed: 4, Duration: 60 * time.Minute, Rate: 3, SystemPrompts: 1, PromptBlocks: 1, NewBlocks: 15, Continue: 0.35, MedianGap: 150 * time.Second},
	} {
		checks = append(checks, check{fmt.Sprintf("synthetic %d", i+1), replay.Synthetic(c), []int64{1_000_000, 2_000_000, 4_000_000}})
	}
	fmt.Printf("%-13s %10s %7s %7s %7s %8s\n", "trace", "tokens", "reuse", "LRU", "Belady", "vs LRU")
	for _, c := range checks {
		for _, capacity := range c.caps {
			got, err := replay.Run(c.trace, replay.Config{CapacityTokens: capacity, Eviction: func(policy.Tier) (policy.Eviction, error) { return native.Eviction(newPolicy()), nil }})
			if err != nil {
				t.Fatal(err)
			}
			lru, err := replay.Run(c.trace, replay.Config{CapacityTokens: capacity, Eviction: func(policy.Tier) (policy.Eviction, error) { return policy.NewLRU(), nil }})
			if err != nil {
				t.Fatal(err)
			}
			bel := replay.Belady(c.trace, capacity, 512)
			fmt.Printf("%-13s %10d %7.4f %7.4f %7.4f %+8.4f\n", c.name, capacity, got.HitRate(), lru.HitRate(), bel.HitRate(), got.HitRate()-lru.HitRate())
		}
	}
}

// TestOracle prints what better prediction of reuse would earn on the
// conversation trace: the policy's hit rate at 3M tokens when its
// new-blocks feature is replaced by hints of chosen quality (AUC) of
// whether each block is asked for again, and the two-tier replay (3M
// tokens of memory, 30M of disk, LRU on both) with admission that writes
// back only the better-hinted half of new blocks, beside write-through of
// every block. For scale it prints like-for-like measures of what the
// policy knows: the in-sample AUC of its classes, online and hinted, over
// every access (what eviction ranks), and of the online classes and the
// hints over blocks' first accesses (what admission decides on). Like
// TestReport, a tool run when REUSE_REPORT is set.
func TestOracle(t *testing.T) {
	if os.Getenv("REUSE_REPORT") == "" {
		t.Skip("REUSE_REPORT unset")
	}
	tr, err := replay.LoadTrace(testenv.Trace(t, "conversation_trace.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	const memory, disk = 3_000_000, 30_000_000
	lru := func(policy.Tier) (policy.Eviction, error) { return policy.NewLRU(), nil }
	through, err := replay.Run(tr, replay.Config{CapacityTokens: memory, DiskCapacityTokens: disk, Eviction: lru,
		Admission: func() (policy.Admission, error) { return writeThrough{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	sig := replay.Signals(tr, 512)
	fmt.Printf("online classes: AUC %.3f, over first accesses %.3f; write-through: %d disk writes, hit rate %.4f\n",
		sig.BlockClassAUC, sig.BlockClassAUCFirst, through.BlocksWrittenDisk, through.HitRate())
	fmt.Printf("%6s %8s %7s %7s %8s %12s %9s\n", "AUC", "measured", "classes", "first", "reuse", "disk writes", "hit rate")
	for _, quality := range []float64{0.5, 0.6, 0.7, 0.75, 0.8, 0.825, 0.85, 0.875, 0.9, 0.95, 1} {
		h := replay.NewHints(tr, 512, quality)
		misses := 0
		got, err := replay.Run(tr, replay.Config{CapacityTokens: memory, Eviction: func(policy.Tier) (policy.Eviction, error) {
			p := newPolicy()
			p.classOf = func(b *block, _ *request) int {
				q, ok := h.Quantile(b.last*int64(time.Millisecond), b.id)
				if !ok {
					misses++
				}
				c := min(int(q*freshClasses), freshClasses-1)*useClasses + bucket(int(b.uses), 1, 2, 4)
				if b.partial {
					c += classes / 2
				}
				return c
			}
			return native.Eviction(p), nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		adm, err := replay.Run(tr, replay.Config{CapacityTokens: memory, DiskCapacityTokens: disk, Eviction: lru,
			Admission: func() (policy.Admission, error) { return h.Admission(), nil }})
		if err != nil {
			t.Fatal(err)
		}
		if misses > 0 {
			t.Fatalf("%d lifetimes had no hint: the key does not match the replay's", misses)
		}
		fmt.Printf("%6.3f %8.3f %7.3f %7.3f %8.4f %12d %9.4f\n", quality, h.AUC(), h.ClassAUC(), h.FirstAUC(), got.HitRate(), adm.BlocksWrittenDisk, adm.HitRate())
	}
}

type writeThrough struct{}

func (writeThrough) Admit(inserts []policy.Event, dst []policy.Decision) []policy.Decision {
	for range inserts {
		dst = append(dst, policy.Decision{Disk: policy.DiskNow})
	}
	return dst
}
