package replay

import (
	"math"
	"sync"
	"testing"

	"github.com/kvmesh/kvmesh/internal/testenv"
	"github.com/kvmesh/kvmesh/policy"
)

// conversationTrace is the Mooncake conversation trace, read once.
func conversationTrace(t *testing.T) []Request {
	t.Helper()
	traceOnce.Do(func() { trace, traceErr = LoadTrace(testenv.Trace(t, "conversation_trace.jsonl")) })
	if traceErr != nil {
		t.Fatal(traceErr)
	}
	return trace
}

var (
	traceOnce sync.Once
	trace     []Request
	traceErr  error
)

func nativeLRU(policy.Tier) (policy.Eviction, error) { return policy.NewLRU(), nil }

func near(got, want float64) bool { return math.Abs(got-want) <= 0.002 }

// TestReproducesPublishedHitRates pins the replay's semantics to the
// figures quoted for the conversation trace.
func TestReproducesPublishedHitRates(t *testing.T) {
	t.Parallel()
	tr := conversationTrace(t)
	for _, tc := range []struct {
		capacity    int64
		lru, belady float64
	}{
		{3_000_000, 0.1355, 0.3532},
		{10_240_000, 0.2875, 0.3664},
	} {
		res, err := Run(tr, Config{CapacityTokens: tc.capacity, Eviction: nativeLRU})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.HitRate(); !near(got, tc.lru) {
			t.Errorf("LRU at %d tokens: hit rate %.4f, want %.4f", tc.capacity, got, tc.lru)
		}
		if got := Belady(tr, tc.capacity, 512).HitRate(); !near(got, tc.belady) {
			t.Errorf("Belady at %d tokens: hit rate %.4f, want %.4f", tc.capacity, got, tc.belady)
		}
	}
}
