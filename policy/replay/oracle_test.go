package replay

import (
	"math"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/policy"
)

func oracleTrace() []Request {
	return Synthetic(SyntheticConfig{Seed: 7, Duration: 20 * time.Minute, Rate: 2, SystemPrompts: 4, PromptBlocks: 2, NewBlocks: 6, Continue: 0.4, MedianGap: time.Minute})
}

// TestHintsOfFullQualityAreTheLabels: at AUC 1 every access followed by
// another of its block ranks above every access that is not.
func TestHintsOfFullQualityAreTheLabels(t *testing.T) {
	t.Parallel()
	tr := oracleTrace()
	h := NewHints(tr, 1)
	if h.AUC() != 1 {
		t.Fatalf("measured AUC %v, want 1", h.AUC())
	}
	reused := futureReuse(tr)
	lowestReused, highestNot := math.Inf(1), math.Inf(-1)
	for i, req := range tr {
		for j, id := range req.HashIDs {
			q := h.Quantile(req.Timestamp*1e6, id+1)
			if reused[i][j] {
				lowestReused = min(lowestReused, q)
			} else {
				highestNot = max(highestNot, q)
			}
		}
	}
	if lowestReused <= highestNot {
		t.Fatalf("a reused access ranks at %v, below an access never followed by another at %v", lowestReused, highestNot)
	}
	if q := h.Quantile(tr[0].Timestamp*1e6+1, tr[0].HashIDs[0]+1); q != 0 {
		t.Errorf("an access the trace does not have ranks at %v, want 0", q)
	}
}

// TestHintsHaveTheQualityAskedFor: the measured AUC is the one asked for,
// within sampling error.
func TestHintsHaveTheQualityAskedFor(t *testing.T) {
	t.Parallel()
	tr := oracleTrace()
	for _, want := range []float64{0.5, 0.7, 0.9} {
		if got := NewHints(tr, want).AUC(); math.Abs(got-want) > 0.03 {
			t.Errorf("hints asked for at AUC %v measure %v", want, got)
		}
	}
}

// TestHintedAdmissionWritesOnlyWhatComesBack: told perfectly, admission
// writes back only blocks that are asked for again, so it writes far fewer
// than write-back of every block and loses no hit.
func TestHintedAdmissionWritesOnlyWhatComesBack(t *testing.T) {
	t.Parallel()
	tr := oracleTrace()
	cfg := Config{CapacityTokens: 50 * 512, DiskCapacityTokens: 5000 * 512, Eviction: nativeLRU}
	all, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHints(tr, 1)
	cfg.Admission = func() (policy.Admission, error) { return h.Admission(), nil }
	hinted, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("write-back: %d written, hit rate %.4f; hinted: %d, %.4f", all.BlocksWrittenDisk, all.HitRate(), hinted.BlocksWrittenDisk, hinted.HitRate())
	if hinted.BlocksWrittenDisk*2 > all.BlocksWrittenDisk {
		t.Errorf("hinted admission wrote %d blocks, write-back %d: want at most half", hinted.BlocksWrittenDisk, all.BlocksWrittenDisk)
	}
	if hinted.Hits < all.Hits {
		t.Errorf("hinted admission hit %d blocks, write-back %d", hinted.Hits, all.Hits)
	}
}
