package replay

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/internal/testenv"
	"github.com/kvmesh/kvmesh/policy"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// shippedModule compiles wasm-policies/NAME. The deadline is generous: a
// test must not see a sound module fail because the machine is loaded.
func shippedModule(t *testing.T, name string) *policy.Module {
	t.Helper()
	ctx := context.Background()
	rt, err := policy.NewRuntime(ctx, testenv.CacheDir(), policy.Limits{CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(ctx) })
	m, err := rt.Compile(ctx, testenv.ReadPolicy(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wasmEviction binds m per tier and remembers the bindings, so a test can
// check that none fell back to the native policy.
func wasmEviction(t *testing.T, m *policy.Module, bound *[]*policy.WasmEviction) func(policy.Tier) (policy.Eviction, error) {
	return func(tier policy.Tier) (policy.Eviction, error) {
		w, err := m.NewEviction(context.Background(), tier, policy.BindConfig{})
		if err == nil {
			*bound = append(*bound, w)
			t.Cleanup(w.Close)
		}
		return w, err
	}
}

// TestReuseModuleBeatsLRU replays the shipped reuse module, as wasm, over
// the conversation trace and over a synthetic trace unlike it: it must
// beat LRU by 0.02 on both without ever falling back.
func TestReuseModuleBeatsLRU(t *testing.T) {
	t.Parallel()
	m := shippedModule(t, "reuse")
	synthetic := Synthetic(SyntheticConfig{Seed: 3, Duration: 40 * time.Minute, Rate: 3, SystemPrompts: 8, PromptBlocks: 4, NewBlocks: 8, Continue: 0.4, MedianGap: time.Minute})
	for _, tc := range []struct {
		name     string
		trace    []Request
		capacity int64
	}{
		{"conversation trace", conversationTrace(t), 3_000_000},
		{"synthetic", synthetic, 1_500_000},
	} {
		var bound []*policy.WasmEviction
		got, err := Run(tc.trace, Config{CapacityTokens: tc.capacity, Eviction: wasmEviction(t, m, &bound)})
		if err != nil {
			t.Fatal(err)
		}
		lru, err := Run(tc.trace, Config{CapacityTokens: tc.capacity, Eviction: nativeLRU})
		if err != nil {
			t.Fatal(err)
		}
		if err := bound[0].Err(); err != nil {
			t.Fatalf("%s: the module fell back: %v", tc.name, err)
		}
		t.Logf("%s at %d tokens: reuse %.4f, LRU %.4f", tc.name, tc.capacity, got.HitRate(), lru.HitRate())
		if got.HitRate() < lru.HitRate()+0.02 {
			t.Errorf("%s: reuse %.4f, LRU %.4f: want at least 0.02 better", tc.name, got.HitRate(), lru.HitRate())
		}
	}
}

// TestSightingAdmission replays two tiers (memory 3M tokens, disk 30M):
// the shipped admission module must write at least 12% fewer blocks to disk
// than writing every block through (it writes about 17% fewer), at no more
// than a point of hit rate. (Issue #3 asked for half: on this trace no
// admission policy gets there within a point, as whether a request's blocks
// come back is barely told by anything its records carry; see
// wasm-policies/sighting.)
func TestSightingAdmission(t *testing.T) {
	t.Parallel()
	tr := conversationTrace(t)
	m := shippedModule(t, "sighting")
	var bound []*policy.WasmAdmission
	cfg := Config{CapacityTokens: 3_000_000, DiskCapacityTokens: 30_000_000, Eviction: nativeLRU}
	got, err := Run(tr, withAdmission(cfg, func() (policy.Admission, error) {
		a, err := m.NewAdmission(context.Background(), policy.BindConfig{})
		if err == nil {
			bound = append(bound, a)
			t.Cleanup(a.Close)
		}
		return a, err
	}))
	if err != nil {
		t.Fatal(err)
	}
	through, err := Run(tr, withAdmission(cfg, func() (policy.Admission, error) { return writeThrough{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	if err := bound[0].Err(); err != nil {
		t.Fatalf("the module fell back: %v", err)
	}
	t.Logf("sighting: hit rate %.4f, %d disk writes; write-through: %.4f, %d", got.HitRate(), got.BlocksWrittenDisk, through.HitRate(), through.BlocksWrittenDisk)
	if got.BlocksWrittenDisk*100 > through.BlocksWrittenDisk*88 {
		t.Errorf("%d disk writes, write-through %d: want at least 12%% fewer", got.BlocksWrittenDisk, through.BlocksWrittenDisk)
	}
	if got.HitRate() < through.HitRate()-0.01 {
		t.Errorf("hit rate %.4f, write-through %.4f: lost more than a point", got.HitRate(), through.HitRate())
	}
}

func withAdmission(cfg Config, a func() (policy.Admission, error)) Config {
	cfg.Admission = a
	return cfg
}

type writeThrough struct{}

func (writeThrough) Admit(inserts []policy.Event, dst []policy.Decision) []policy.Decision {
	for range inserts {
		dst = append(dst, policy.Decision{Disk: policy.DiskNow})
	}
	return dst
}
