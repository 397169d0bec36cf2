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
