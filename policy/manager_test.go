package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSlots records what the manager activates, as the store would hold it.
type fakeSlots struct {
	mu        sync.Mutex
	admission Admission
	eviction  map[Tier]Eviction
	prefetch  Prefetch
}

func newFakeSlots() *fakeSlots { return &fakeSlots{eviction: map[Tier]Eviction{}} }

func (f *fakeSlots) SetAdmission(a Admission) { f.mu.Lock(); f.admission = a; f.mu.Unlock() }
func (f *fakeSlots) SetPrefetch(p Prefetch)   { f.mu.Lock(); f.prefetch = p; f.mu.Unlock() }
func (f *fakeSlots) SetEviction(t Tier, e Eviction) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e == nil {
		delete(f.eviction, t)
		return
	}
	f.eviction[t] = e
}

func (f *fakeSlots) evictionOf(t Tier) Eviction {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.eviction[t]
}

// variant returns module with a custom section appended: the same policy
// under a different digest.
func variant(module []byte, name string) []byte {
	section := append(append([]byte{byte(len(name))}, name...), 0)
	return append(append(append([]byte{}, module...), 0, byte(len(section))), section...)
}

type adminClient struct {
	t     *testing.T
	url   string
	token string
}

func (c adminClient) do(method, path string, body []byte) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("%s %s: answer is not JSON: %q", method, path, raw)
	}
	return resp.StatusCode, out
}

func newTestManager(t *testing.T, dir, token string, slots Slots) *Manager {
	t.Helper()
	m, err := NewManager(context.Background(), ManagerConfig{Dir: dir, Token: token, Slots: slots, Limits: Limits{CallTimeout: 100 * time.Millisecond}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestManagerRefusesUploadsWithoutToken(t *testing.T) {
	t.Parallel()
	slots := newFakeSlots()
	m := newTestManager(t, t.TempDir(), "", slots)
	defer m.Close(context.Background())
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	for _, token := range []string{"", "guess"} {
		c := adminClient{t, srv.URL, token}
		if code, body := c.do("POST", "/v1/policies?slot=eviction", wat(t, "good")); code != http.StatusUnauthorized || !strings.Contains(body["error"].(string), "no admin token") {
			t.Fatalf("upload with token %q: %d %v, want 401 saying there is no admin token", token, code, body)
		}
		if code, _ := c.do("POST", "/v1/policies/rollback?slot=eviction", nil); code != http.StatusUnauthorized {
			t.Fatalf("rollback with token %q: %d, want 401", token, code)
		}
	}
	if code, body := (adminClient{t, srv.URL, ""}).do("GET", "/v1/policies", nil); code != http.StatusOK || len(body["slots"].([]any)) != 4 {
		t.Fatalf("listing: %d %v, want 200 with four slots", code, body)
	}
	if slots.evictionOf(TierMemory) != nil {
		t.Fatal("a refused upload reached the store")
	}
}

func TestManagerLifecycle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	slots := newFakeSlots()
	m := newTestManager(t, dir, "s3cret", slots)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	c := adminClient{t, srv.URL, "s3cret"}
	first, second := wat(t, "good"), variant(wat(t, "good"), "v2")

	if code, body := (adminClient{t, srv.URL, "wrong"}).do("POST", "/v1/policies?slot=eviction&tier=disk", first); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d %v", code, body)
	}
	for _, bad := range []struct {
		path   string
		module []byte
		want   string
	}{
		{"/v1/policies?slot=eviction", []byte("not wasm at all"), "not a WebAssembly module"},
		{"/v1/policies?slot=eviction", wat(t, "imports_fs"), "path_open"},
		{"/v1/policies?slot=eviction", wat(t, "loops_in_observe"), "dry run of the eviction slot"},
		{"/v1/policies?slot=admission&tier=disk", first, "tier applies to the eviction slot only"},
		{"/v1/policies?slot=eviction&tier=remote", first, `unknown tier "remote"`},
		{"/v1/policies?slot=sharding", first, `unknown slot "sharding"`},
		{"/v1/policies?slot=prefetch", wat(t, "victims_unknown"), "does not implement the prefetch slot"},
	} {
		code, body := c.do("POST", bad.path, bad.module)
		if code != http.StatusBadRequest || !strings.Contains(body["error"].(string), bad.want) {
			t.Fatalf("POST %s: %d %v, want 400 saying %q", bad.path, code, body, bad.want)
		}
	}

	code, body := c.do("POST", "/v1/policies?slot=eviction&tier=disk", first)
	if code != http.StatusCreated {
		t.Fatalf("upload: %d %v", code, body)
	}
	firstDigest := body["digest"].(string)
	if stored, err := os.ReadFile(filepath.Join(dir, "modules", firstDigest+".wasm")); err != nil || !bytes.Equal(stored, first) {
		t.Fatalf("module not stored under its digest: %v", err)
	}
	e := slots.evictionOf(TierDisk)
	if e == nil || slots.evictionOf(TierMemory) != nil {
		t.Fatal("the upload did not land in the disk tier's eviction slot alone")
	}
	e.Observe(inserts(5, 6))
	if got := e.Victims(nil, 1); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("activated policy answers %v, want the module's FIFO [5]", got)
	}

	if code, body = c.do("POST", "/v1/policies?slot=eviction&tier=disk", second); code != http.StatusCreated {
		t.Fatalf("second upload: %d %v", code, body)
	}
	secondDigest := body["digest"].(string)
	if slot := listedSlot(t, c, "eviction", "disk"); slot["active"] != secondDigest || slot["state"] != "serving" || slot["history"].([]any)[0] != firstDigest {
		t.Fatalf("listing after two uploads: %v", slot)
	}

	// Active policies survive a restart.
	m.Close(context.Background())
	slots2 := newFakeSlots()
	m2 := newTestManager(t, dir, "s3cret", slots2)
	defer m2.Close(context.Background())
	srv2 := httptest.NewServer(m2.Handler())
	defer srv2.Close()
	c = adminClient{t, srv2.URL, "s3cret"}
	if slots2.evictionOf(TierDisk) == nil {
		t.Fatal("the active module was not re-activated at start-up")
	}

	for _, want := range []string{firstDigest, ""} {
		code, body = c.do("POST", "/v1/policies/rollback?slot=eviction&tier=disk", nil)
		if code != http.StatusOK || body["digest"] != want {
			t.Fatalf("rollback: %d %v, want %q active", code, body, want)
		}
	}
	if slots2.evictionOf(TierDisk) != nil {
		t.Fatal("rolling back past the first upload did not restore the native policy")
	}
	if slot := listedSlot(t, c, "eviction", "disk"); slot["state"] != "native" {
		t.Fatalf("listing after rollbacks: %v", slot)
	}
	if code, body = c.do("POST", "/v1/policies/rollback?slot=eviction&tier=disk", nil); code != http.StatusBadRequest || !strings.Contains(body["error"].(string), "nothing to roll back") {
		t.Fatalf("rollback with no history: %d %v", code, body)
	}
}

func TestManagerReportsModuleTakenOutOfService(t *testing.T) {
	t.Parallel()
	slots := newFakeSlots()
	m := newTestManager(t, t.TempDir(), "tok", slots)
	defer m.Close(context.Background())
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	c := adminClient{t, srv.URL, "tok"}
	// Sound for the dry run's 600 requests, it fails when 20000 blocks
	// arrive: its linear scans overrun the deadline, or its 16384 slots
	// overflow.
	if code, body := c.do("POST", "/v1/policies?slot=eviction", wat(t, "good")); code != http.StatusCreated {
		t.Fatalf("upload: %d %v", code, body)
	}
	e := slots.evictionOf(TierMemory)
	batch := make([]Event, 0, 20000)
	for id := uint64(1); id <= 20000; id++ {
		batch = append(batch, Event{ID: id, Kind: EventInsert})
	}
	e.Observe(batch)
	if got := e.Victims(nil, 2); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("victims %v after the module failed, want the native LRU's [1 2]", got)
	}
	slot := listedSlot(t, c, "eviction", "memory")
	if slot["state"] != "failed" || slot["error"] == "" {
		t.Fatalf("listing: %v, want the slot failed, saying why", slot)
	}
	if n := counter(t, m.Metrics().fallbacks.WithLabelValues("eviction_memory")); n != 1 {
		t.Fatalf("%v fallbacks counted, want 1", n)
	}
}

func listedSlot(t *testing.T, c adminClient, slot, tier string) map[string]any {
	t.Helper()
	code, body := c.do("GET", "/v1/policies", nil)
	if code != http.StatusOK {
		t.Fatalf("listing: %d %v", code, body)
	}
	for _, s := range body["slots"].([]any) {
		s := s.(map[string]any)
		if s["slot"] == slot && (tier == "" || s["tier"] == tier) {
			return s
		}
	}
	t.Fatalf("listing has no slot %s %s: %v", slot, tier, body)
	return nil
}
