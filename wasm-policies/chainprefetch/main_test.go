package main

import (
	"slices"
	"testing"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/wasm-policies/internal/native"
)

func lookup(steps ...any) []policy.Event {
	var out []policy.Event
	var prev uint64
	for i := 0; i < len(steps); i += 2 {
		id, tier := steps[i].(int), steps[i+1].(string)
		e := policy.Event{ID: uint64(id), Parent: prev, ChainPos: uint32(i / 2), Kind: policy.EventHit}
		switch tier {
		case "memory":
			e.Tier = policy.TierMemory
		case "disk":
			e.Tier = policy.TierDisk
		default:
			e.Kind = policy.EventMiss
		}
		out = append(out, e)
		prev = uint64(id)
	}
	return out
}

func TestWarmsLeadingRunAndKnownContinuation(t *testing.T) {
	p := native.Prefetch(newChainPrefetch())
	// The leading run's disk blocks are warmed; nothing past the miss.
	if got, want := p.Prefetch(lookup(1, "memory", 2, "disk", 3, "disk", 4, "miss", 5, "disk"), nil), []uint64{2, 3}; !slices.Equal(got, want) {
		t.Fatalf("prefetch %v, want %v", got, want)
	}
	// A longer chain is seen; a later lookup of its prefix warms what is
	// on disk of the rest.
	p.Prefetch(lookup(1, "memory", 2, "memory", 3, "memory", 6, "disk", 7, "memory", 8, "disk"), nil)
	if got, want := p.Prefetch(lookup(1, "memory", 2, "disk", 3, "memory"), nil), []uint64{2, 6, 8}; !slices.Equal(got, want) {
		t.Fatalf("prefetch %v, want the disk block of the run and the continuation's %v", got, want)
	}
	// No continuation after a lookup that missed.
	if got := p.Prefetch(lookup(1, "memory", 2, "memory", 9, "miss"), nil); len(got) != 0 {
		t.Fatalf("prefetch %v after a miss", got)
	}
}
