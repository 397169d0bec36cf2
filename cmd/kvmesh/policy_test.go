package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/internal/testenv"
	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/policy/replay"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// stdout runs f and returns what it printed.
func stdout(t *testing.T, f func() error) (string, error) {
	t.Helper()
	tmp, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = tmp
	err = f()
	os.Stdout = saved
	tmp.Seek(0, io.SeekStart)
	out, _ := io.ReadAll(tmp)
	tmp.Close()
	return string(out), err
}

type slots struct {
	mu       sync.Mutex
	eviction map[policy.Tier]policy.Eviction
}

func (s *slots) SetAdmission(policy.Admission) {}
func (s *slots) SetPrefetch(policy.Prefetch)   {}
func (s *slots) SetEviction(t policy.Tier, e policy.Eviction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eviction[t] = e
}

// TestPolicyCommands pushes, lists and rolls back a module through the
// CLI against a manager on a test server, as against an agent.
func TestPolicyCommands(t *testing.T) {
	store := &slots{eviction: map[policy.Tier]policy.Eviction{}}
	m, err := policy.NewManager(context.Background(), policy.ManagerConfig{Dir: t.TempDir(), Token: "tok", Slots: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	module := testenv.PolicyPath(t, "lru")
	admin := []string{"--admin-addr", u.Host}

	if _, err := stdout(t, func() error {
		return runPolicy(append([]string{"push", module, "--slot", "eviction"}, admin...))
	}); err == nil || !strings.Contains(err.Error(), "missing or wrong bearer token (HTTP 401)") {
		t.Fatalf("push without a token: %v", err)
	}
	t.Setenv("KVMESH_ADMIN_TOKEN", "tok")
	out, err := stdout(t, func() error {
		return runPolicy(append([]string{"push", module, "--slot", "eviction", "--tier", "disk"}, admin...))
	})
	if err != nil || !strings.Contains(out, "is active in the eviction/disk slot") {
		t.Fatalf("push: %v %q", err, out)
	}
	if store.eviction[policy.TierDisk] == nil {
		t.Fatal("the module did not reach the store")
	}

	out, err = stdout(t, func() error { return runPolicy(append([]string{"ls", "--json"}, admin...)) })
	var list policy.Listing
	if err != nil || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("ls --json: %v %q", err, out)
	}
	if s := list.Slots[2]; s.Slot != "eviction" || s.Tier != "disk" || s.State != "serving" || len(list.Modules) != 1 || list.Modules[0].Digest != s.Active {
		t.Fatalf("listing %+v", list)
	}
	out, err = stdout(t, func() error { return runPolicy(append([]string{"ls"}, admin...)) })
	if err != nil || !strings.Contains(out, "eviction/disk") || !strings.Contains(out, list.Slots[2].Active[:12]) {
		t.Fatalf("ls: %v\n%s", err, out)
	}

	out, err = stdout(t, func() error {
		return runPolicy(append([]string{"rollback", "--slot", "eviction", "--tier", "disk"}, admin...))
	})
	if err != nil || !strings.Contains(out, "back on its native policy") {
		t.Fatalf("rollback: %v %q", err, out)
	}
	if _, err := stdout(t, func() error { return runPolicy(append([]string{"push", module}, admin...)) }); err == nil {
		t.Fatal("push without --slot accepted")
	}
}

// TestReplayCommand replays a synthetic trace with a native and a wasm
// policy, one and two tiers, and checks the report and the plot.
func TestReplayCommand(t *testing.T) {
	dir := t.TempDir()
	tracePath := filepath.Join(dir, "trace.jsonl")
	f, err := os.Create(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	trace := replay.Synthetic(replay.SyntheticConfig{Seed: 5, Duration: 10 * time.Minute, Rate: 2, SystemPrompts: 2, PromptBlocks: 2, NewBlocks: 8, Continue: 0.4, MedianGap: time.Minute})
	if err := replay.WriteTrace(f, trace); err != nil {
		t.Fatal(err)
	}
	f.Close()

	report := func(args ...string) replayReport {
		t.Helper()
		out, err := stdout(t, func() error { return runReplay(append([]string{"--trace", tracePath, "--json"}, args...)) })
		var r replayReport
		if err != nil || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("replay %v: %v %q", args, err, out)
		}
		return r
	}
	r := report("--capacity-tokens", "500000", "--policy", "lru")
	if r.HitRate != r.LRUHitRate || r.BeladyHitRate <= r.HitRate || r.Blocks == 0 || r.NsPerEvent <= 0 || r.BlocksWrittenDisk != 0 {
		t.Fatalf("native LRU report %+v", r)
	}

	plot := filepath.Join(dir, "plot.svg")
	r = report("--capacity-tokens", "500000", "--disk-capacity-tokens", "2000000",
		"--policy", testenv.PolicyPath(t, "s3fifo"), "--admission", testenv.PolicyPath(t, "sighting"), "--plot", plot)
	if r.Policy != "s3fifo.wasm" || r.Admission != "sighting.wasm" || r.Fallback != "" || r.BlocksWrittenDisk == 0 ||
		r.DiskHitRate <= 0 || r.HitRate > r.BeladyHitRate {
		t.Fatalf("two-tier wasm report %+v", r)
	}
	svg, err := os.ReadFile(plot)
	if err != nil || !strings.HasPrefix(string(svg), "<svg") || strings.Count(string(svg), "<polyline") != 3 {
		t.Fatalf("plot: %v\n%.200s", err, svg)
	}

	if _, err := stdout(t, func() error {
		return runReplay([]string{"--trace", tracePath, "--capacity-tokens", "1000", "--policy", "nosuch"})
	}); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("unknown policy: %v", err)
	}
}

func TestBenchPolicy(t *testing.T) {
	out, err := stdout(t, func() error {
		return benchPolicy([]string{"--module", testenv.PolicyPath(t, "lru"), "--reps", "1", "--json"})
	})
	var r struct {
		Native float64 `json:"native_ns_per_event"`
		Wasm   float64 `json:"wasm_ns_per_event"`
		Events int64   `json:"events"`
	}
	if err != nil || json.Unmarshal([]byte(out), &r) != nil || r.Native <= 0 || r.Wasm <= 0 || r.Events == 0 {
		t.Fatalf("bench policy: %v %q", err, out)
	}
}
