package replay

import (
	"math"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/policy"
)

// oracleTrace is a synthetic trace whose times are whole 3-second steps,
// as in the Mooncake traces, so several requests share an instant (and
// their system prompt's blocks).
func oracleTrace(continued float64) []Request {
	tr := Synthetic(SyntheticConfig{Seed: 7, Duration: 20 * time.Minute, Rate: 2, SystemPrompts: 4, PromptBlocks: 2, NewBlocks: 6, Continue: continued, MedianGap: time.Minute})
	for i := range tr {
		tr[i].Timestamp -= tr[i].Timestamp % 3000
	}
	return tr
}

// TestHintsOfFullQualityAreTheLabels: at AUC 1 every access after which
// the block is asked for again ranks above every access after which it is
// not, and every access of the trace has a hint.
func TestHintsOfFullQualityAreTheLabels(t *testing.T) {
	t.Parallel()
	tr := oracleTrace(0.4)
	h := NewHints(tr, 512, 1)
	if h.AUC() != 1 || h.FirstAUC() != 1 {
		t.Fatalf("measured AUC %v, over first accesses %v: want 1", h.AUC(), h.FirstAUC())
	}
	lowestReused, highestNot := math.Inf(1), math.Inf(-1)
	for _, a := range h.acc {
		q, ok := h.Quantile(a.key.time, a.key.id)
		if !ok {
			t.Fatalf("no hint for block %d at %d ns", a.key.id, a.key.time)
		}
		if a.reused {
			lowestReused = min(lowestReused, q)
		} else {
			highestNot = max(highestNot, q)
		}
	}
	if lowestReused <= highestNot {
		t.Fatalf("a reused access ranks at %v, below an access never followed by another at %v", lowestReused, highestNot)
	}
	if _, ok := h.Quantile(tr[0].Timestamp*1e6+1, tr[0].HashIDs[0]+1); ok {
		t.Error("an access the trace does not have has a hint")
	}
}

// TestHintsHaveTheQualityAskedFor: the measured AUC is the one asked for,
// within sampling error, although requests of one instant share blocks.
func TestHintsHaveTheQualityAskedFor(t *testing.T) {
	t.Parallel()
	tr := oracleTrace(0.4)
	for _, want := range []float64{0.5, 0.7, 0.9} {
		if got := NewHints(tr, 512, want).AUC(); math.Abs(got-want) > 0.03 {
			t.Errorf("hints asked for at AUC %v measure %v", want, got)
		}
	}
}

// TestHintedAdmissionWritesTheBetterHalf: told perfectly, admission
// writes back about half the new blocks, those asked for again first,
// so it loses no hit to write-back of every block; whether reused blocks
// are under half of new blocks or over it.
func TestHintedAdmissionWritesTheBetterHalf(t *testing.T) {
	t.Parallel()
	for _, continued := range []float64{0.3, 0.9} {
		tr := oracleTrace(continued)
		cfg := Config{CapacityTokens: 50 * 512, DiskCapacityTokens: 5000 * 512, Eviction: nativeLRU}
		all, err := Run(tr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		h := NewHints(tr, 512, 1)
		cfg.Admission = func() (policy.Admission, error) { return h.Admission(), nil }
		hinted, err := Run(tr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("continue %v: write-back %d written, hit rate %.4f; hinted %d, %.4f", continued, all.BlocksWrittenDisk, all.HitRate(), hinted.BlocksWrittenDisk, hinted.HitRate())
		if w := float64(hinted.BlocksWrittenDisk) / float64(all.BlocksWrittenDisk); w < 0.4 || w > 0.6 {
			t.Errorf("continue %v: hinted admission wrote %d blocks, write-back %d: want about half", continued, hinted.BlocksWrittenDisk, all.BlocksWrittenDisk)
		}
		if hinted.Hits < all.Hits {
			t.Errorf("continue %v: hinted admission hit %d blocks, write-back %d", continued, hinted.Hits, all.Hits)
		}
	}
}
