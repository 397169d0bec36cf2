package policy

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFuelStopsRunawayCode: however a module spends its time, a call ends
// within its fuel and the module is taken out of service.
func TestFuelStopsRunawayCode(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	tests := []struct {
		name, module string
		inserts      int
		want         string // "" for no failure
	}{
		{"loop within its fuel", "spins", 1, ""}, // ten million iterations fit a 50ms deadline
		{"loop beyond its fuel", "spins", 16, "overran its 50ms deadline"},
		{"bulk memory forever", "fills_forever", 1, "overran its 50ms deadline"},
		{"recursion forever", "recurses_forever", 1, "stack overflow"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := compile(t, rt, wat(t, tc.module)).NewAdmission(context.Background(), BindConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			start := time.Now()
			if got := a.Admit(inserts(make([]uint64, tc.inserts)...), nil); len(got) != tc.inserts {
				t.Fatalf("%d decisions for %d inserts", len(got), tc.inserts)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("the call took %v", took)
			}
			err = a.Err()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("module taken out of service: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("module error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestMeterRejects(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	for module, want := range map[string]string{
		"exports_fuel": "module already exports kvmesh_fuel",
		"uses_simd":    "is not supported by the policy sandbox",
	} {
		if m, err := rt.Compile(context.Background(), wat(t, module)); err == nil || !strings.Contains(err.Error(), want) {
			if m != nil {
				m.Close(context.Background())
			}
			t.Errorf("%s: error %v, want one saying %q", module, err, want)
		}
	}
}

// TestMeteredCodeKeepsItsMeaning: metering changes what a module costs,
// not what it computes; the branches of every kind of block still land
// where they did.
func TestMeteredCodeKeepsItsMeaning(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	m := compile(t, rt, wat(t, "good"))
	e, err := m.NewEviction(context.Background(), TierMemory, BindConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// Inserts, duplicates, removals in the middle: every branch of the
	// module's observe and find.
	e.Observe(inserts(1, 2, 3, 2, 4, 5, 1, 6))
	e.Observe([]Event{{ID: 3, Kind: EventRemove}, {ID: 9, Kind: EventRemove}, {ID: 1, Kind: EventDemote}})
	if got, want := e.Victims(nil, 10), []uint64{2, 4, 5, 6}; !slices.Equal(got, want) || e.Err() != nil {
		t.Fatalf("victims %v (%v), want %v", got, e.Err(), want)
	}
}

// TestFuelReachesCallers: a function keeps its fuel in a local, so what a
// callee spends must come back to its caller, whichever way the callee
// leaves, and a loop whose work is all in a callee must still run out.
func TestFuelReachesCallers(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	ctx := context.Background()

	a, err := compile(t, rt, wat(t, "fuel_paths")).NewAdmission(ctx, BindConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	spent := func(n int) int64 {
		if got := a.Admit(inserts(make([]uint64, n)...), nil); len(got) != n || a.Err() != nil {
			t.Fatalf("%d decisions for %d inserts (%v)", len(got), n, a.Err())
		}
		return budget(testLimits.CallTimeout) - int64(a.in.fuel.Get())
	}
	// Per insert the helpers spin 4×1000 times at 2, 3 (the return after
	// the loop is in the segment each iteration pays for), 4 and 3 units.
	if per := (spent(3) - spent(1)) / 2; per < 12_000 || per > 12_100 {
		t.Fatalf("an insert cost %d units of fuel, want 12000 and a few", per)
	}

	e, err := compile(t, rt, wat(t, "calls_forever")).NewEviction(ctx, TierMemory, BindConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	start := time.Now()
	e.Observe(inserts(1, 2))
	if got := e.Victims(nil, 2); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("victims %v, want the native LRU's", got)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the call took %v", took)
	}
	if err := e.Err(); err == nil || !strings.Contains(err.Error(), "overran its 50ms deadline") {
		t.Fatalf("module error %v, want the deadline", err)
	}
}
