package policy

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

var (
	watMu    sync.Mutex
	watBuilt = map[string][]byte{}
)

// wat compiles testdata/NAME.wat with wat2wasm (Debian package wabt).
func wat(t *testing.T, name string) []byte {
	t.Helper()
	watMu.Lock()
	defer watMu.Unlock()
	if b, ok := watBuilt[name]; ok {
		return b
	}
	tool, err := exec.LookPath("wat2wasm")
	if err != nil {
		t.Fatalf("wat2wasm not found (install wabt: make deps): %v", err)
	}
	out := filepath.Join(t.TempDir(), name+".wasm")
	if msg, err := exec.Command(tool, filepath.Join("testdata", name+".wat"), "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm %s: %v\n%s", name, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	watBuilt[name] = b
	return b
}

// testLimits keep deadlines short so the tests of modules that loop end
// quickly, and batches small so a few events span several calls.
var testLimits = Limits{CallTimeout: 50 * time.Millisecond, InitTimeout: 500 * time.Millisecond, BatchEvents: 4}

func newTestRuntime(t *testing.T, limits Limits) *Runtime {
	t.Helper()
	rt, err := NewRuntime(context.Background(), testenv.CacheDir(), limits)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

func TestCompileRejects(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	tests := []struct {
		name   string
		module []byte
		want   string
	}{
		{"not wasm", []byte("#!/bin/sh\necho pwned\n"), "not a WebAssembly module"},
		{"truncated wasm", wat(t, "good")[:40], "not a valid WebAssembly module"},
		{"wrong ABI version", wat(t, "wrong_version"), "module speaks ABI version 2, this agent speaks 1"},
		{"no ABI version", wat(t, "no_version"), "does not export kvmesh_abi_version"},
		{"no slot", wat(t, "no_slot"), "implements no slot"},
		{"filesystem import", wat(t, "imports_fs"), "imports wasi_snapshot_preview1.path_open, which the policy sandbox does not provide"},
		{"socket import", wat(t, "imports_socket"), "imports wasi_snapshot_preview1.sock_accept, which the policy sandbox does not provide"},
		{"unknown host import", wat(t, "imports_env"), "imports env.get_secret"},
		{"import with wrong signature", wat(t, "imports_wrong_signature"), "imports wasi_snapshot_preview1.random_get with signature (i64)->(i32)"},
		{"loops at start-up", wat(t, "loops_at_start"), "overran its 500ms deadline"},
		{"buffer outside memory", wat(t, "buffer_outside_memory"), "inside the module's 131072 bytes of memory"},
		{"telemetry export with wrong signature", wat(t, "telemetry_wrong_signature"), "export kvmesh_telemetry has signature (i64)->(i32)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := rt.Compile(context.Background(), tc.module)
			if err == nil {
				m.Close(context.Background())
				t.Fatal("module accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func compile(t *testing.T, rt *Runtime, module []byte) *Module {
	t.Helper()
	m, err := rt.Compile(context.Background(), module)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

func inserts(ids ...uint64) []Event {
	out := make([]Event, len(ids))
	for i, id := range ids {
		out[i] = Event{Time: int64(i), ID: id, Kind: EventInsert, Tokens: 512}
	}
	return out
}

// TestGoodModuleSlots drives each export of the hand-written module and
// checks that its answers arrive intact.
func TestGoodModuleSlots(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	m := compile(t, rt, wat(t, "good"))
	if got := m.Slots(); len(got) != 3 {
		t.Fatalf("slots %v, want all three", got)
	}
	ctx := context.Background()
	metrics := NewMetrics()

	ev, err := m.NewEviction(ctx, TierDisk, BindConfig{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	ev.Observe(inserts(10, 11, 12, 13, 14, 15, 16))
	ev.Observe([]Event{{ID: 12, Kind: EventRemove}, {ID: 14, Kind: EventDemote}, {ID: 10, Kind: EventHit}})
	if got, want := ev.Victims(nil, 3), []uint64{10, 11, 13}; !slices.Equal(got, want) {
		t.Fatalf("victims %v, want FIFO order %v", got, want)
	}
	if got, want := ev.Victims([]uint64{99}, 100), []uint64{99, 10, 11, 13, 15, 16}; !slices.Equal(got, want) {
		t.Fatalf("victims %v, want %v appended to dst", got, want)
	}

	ad, err := m.NewAdmission(ctx, BindConfig{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	got := ad.Admit(inserts(1, 2, 3, 4, 5, 6, 7, 8, 9), nil)
	if len(got) != 9 {
		t.Fatalf("%d decisions for 9 inserts", len(got))
	}
	for _, d := range got {
		if d != (Decision{Disk: DiskNow}) {
			t.Fatalf("decision %+v, want write-through", d)
		}
	}

	pf, err := m.NewPrefetch(ctx, BindConfig{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	lookup := []Event{
		{ID: 1, Kind: EventHit, Tier: TierMemory}, {ID: 2, Kind: EventHit, Tier: TierDisk},
		{ID: 3, Kind: EventHit, Tier: TierDisk}, {ID: 4, Kind: EventHit, Tier: TierMemory},
		{ID: 5, Kind: EventHit, Tier: TierDisk}, {ID: 0, Kind: EventMiss},
	}
	if got, want := pf.Prefetch(lookup, nil), []uint64{2, 3, 5}; !slices.Equal(got, want) {
		t.Fatalf("prefetch %v, want the disk hits %v", got, want)
	}

	for _, b := range []interface{ Err() error }{ev, ad, pf} {
		if err := b.Err(); err != nil {
			t.Fatalf("module taken out of service: %v", err)
		}
	}
	if n := counter(t, metrics.calls.WithLabelValues("eviction_disk")); n < 3 {
		t.Fatalf("%v eviction calls counted, want at least 3", n)
	}
	if n := counter(t, metrics.fallbacks.WithLabelValues("eviction_disk")); n != 0 {
		t.Fatalf("%v fallbacks counted for a healthy module", n)
	}
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestRuntimeFailuresFallBack checks that each way a module can misbehave
// while serving takes it out of service at once, that the slot's native
// policy answers that very call, and that metrics say why.
func TestRuntimeFailuresFallBack(t *testing.T) {
	t.Parallel()
	limits := testLimits
	limits.MemoryPages = 64
	rt := newTestRuntime(t, limits)
	lookup := []Event{{ID: 7, Kind: EventHit, Tier: TierDisk}, {ID: 8, Kind: EventHit, Tier: TierMemory}}
	tests := []struct {
		module, slot, reason, want string
		victims                    int // how many victims to ask for
	}{
		{"loops_in_observe", "eviction", reasonDeadline, "overran its 50ms deadline", 3},
		{"victims_unknown", "eviction", reasonAnswer, "answered block 999999, which the tier does not hold", 1},
		{"victims_too_many", "eviction", reasonAnswer, "answered 4 victims", 3},
		{"victims_duplicate", "eviction", reasonAnswer, "answered block 1 twice", 2},
		{"grows_memory", "admission", reasonMemory, "ran out of memory (64 pages)", 0},
		{"admit_out_of_range", "admission", reasonAnswer, "disk write mode 7 out of range", 0},
		{"admit_short", "admission", reasonAnswer, "answered 2 decisions for 3 inserts", 0},
		{"prefetch_unknown", "prefetch", reasonAnswer, "answered block 424242, which no recent lookup named", 0},
	}
	for _, tc := range tests {
		t.Run(tc.module, func(t *testing.T) {
			t.Parallel()
			// The dry run an upload does must catch each of these too.
			m := compile(t, rt, wat(t, tc.module))
			if err := m.DryRun(context.Background()); err == nil || !strings.Contains(err.Error(), "dry run of the "+tc.slot+" slot") {
				t.Fatalf("dry run: %v, want an error about the %s slot", err, tc.slot)
			}

			metrics := NewMetrics()
			var disabled []error
			cfg := BindConfig{Metrics: metrics, OnDisable: func(err error) { disabled = append(disabled, err) }}
			var label string
			var b interface{ Err() error }
			switch tc.slot {
			case "eviction":
				w, err := m.NewEviction(context.Background(), TierMemory, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				w.Observe(inserts(1, 2, 3))
				if got, want := w.Victims(nil, tc.victims), []uint64{1, 2, 3}[:tc.victims]; !slices.Equal(got, want) {
					t.Fatalf("victims %v, want the native LRU's %v", got, want)
				}
				b, label = w, "eviction_memory"
			case "admission":
				w, err := m.NewAdmission(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				got := w.Admit(inserts(1, 2, 3), []Decision{{Disk: DiskNever}})
				if len(got) != 4 || got[0].Disk != DiskNever || got[1] != (Decision{Disk: DiskOnEvict}) || got[3] != (Decision{Disk: DiskOnEvict}) {
					t.Fatalf("decisions %+v, want dst kept and WriteBack's decision for each insert", got)
				}
				b, label = w, "admission"
			case "prefetch":
				w, err := m.NewPrefetch(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if got, want := w.Prefetch(lookup, nil), []uint64{7}; !slices.Equal(got, want) {
					t.Fatalf("prefetch %v, want WarmPrefix's %v", got, want)
				}
				b, label = w, "prefetch"
			}
			err := b.Err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("module error %v, want one saying %q", err, tc.want)
			}
			if len(disabled) != 1 || !errors.Is(disabled[0], err) {
				t.Fatalf("OnDisable called with %v, want once with %v", disabled, err)
			}
			if n := counter(t, metrics.failures.WithLabelValues(label, tc.reason)); n != 1 {
				t.Fatalf("%v failures counted for %s/%s, want 1", n, label, tc.reason)
			}
			if n := counter(t, metrics.fallbacks.WithLabelValues(label)); n != 1 {
				t.Fatalf("%v fallbacks counted, want 1", n)
			}
		})
	}
}

// TestFallbackLosesNothing takes a module out of service in the middle of
// a stream: from then on the slot must answer exactly as the native policy
// fed the whole stream would.
func TestFallbackLosesNothing(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	m := compile(t, rt, wat(t, "traps_after_two_batches"))
	w, err := m.NewEviction(context.Background(), TierMemory, BindConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	native := NewLRU()
	stream := [][]Event{
		inserts(1, 2, 3, 4, 5, 6),
		{{ID: 2, Kind: EventHit}, {ID: 4, Kind: EventRemove}},
		inserts(7, 8, 9, 10),
		{{ID: 1, Kind: EventHit}, {ID: 3, Kind: EventDemote}},
	}
	for _, batch := range stream {
		w.Observe(batch)
		native.Observe(batch)
	}
	if w.Err() == nil || !strings.Contains(w.Err().Error(), "unreachable") {
		t.Fatalf("module error %v, want the trap of its third call", w.Err())
	}
	if got, want := w.Victims(nil, 100), native.Victims(nil, 100); !slices.Equal(got, want) {
		t.Fatalf("after the fallback victims are %v, the native policy's are %v", got, want)
	}
}

func TestDryRunAcceptsGoodModule(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, Limits{})
	if err := compile(t, rt, wat(t, "good")).DryRun(context.Background()); err != nil {
		t.Fatal(err)
	}
}
