package main

import (
	"testing"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/wasm-policies/internal/native"
)

func TestPartialBlocksGoToDiskOnSecondSighting(t *testing.T) {
	a := native.Admission(newSighting())
	insert := func(id uint64, tokens uint32) policy.DiskWrite {
		d := a.Admit([]policy.Event{{ID: id, Tokens: tokens, Kind: policy.EventInsert}}, nil)
		if len(d) != 1 || d[0].Replicas != 0 || d[0].Ack != policy.DurableMemory {
			t.Fatalf("decisions %+v", d)
		}
		return d[0].Disk
	}
	for _, step := range []struct {
		id     uint64
		tokens uint32
		want   policy.DiskWrite
	}{
		{1, 512, policy.DiskOnEvict}, // full: written back
		{2, 100, policy.DiskNever},   // partial, first seen: memory only
		{3, 512, policy.DiskOnEvict},
		{2, 100, policy.DiskOnEvict}, // partial, seen again: worth the disk
		{4, 511, policy.DiskNever},
		{1, 512, policy.DiskOnEvict},
	} {
		if got := insert(step.id, step.tokens); got != step.want {
			t.Fatalf("block %d (%d tokens): %v, want %v", step.id, step.tokens, got, step.want)
		}
	}
}
