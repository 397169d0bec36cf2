package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Slots is where activated policies take effect (the block store implements it).
type Slots interface {
	SetAdmission(a Admission)          // nil restores the native policy
	SetEviction(tier Tier, e Eviction) // nil restores the native policy
	SetPrefetch(p Prefetch)            // nil restores the native policy
}

// A policy handed to SetEviction knows nothing of the blocks already in
// the tier: the store should feed it one EventInsert per block it holds,
// least recently used first, before routing events to it.

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Dir holds the uploaded modules (modules/<sha256>.wasm), the state of
	// the slots (state.json) and the compilation cache (cache/). Created if
	// missing.
	Dir string
	// Token is the bearer token the admin API wants for uploads and
	// rollbacks; with none, they are refused.
	Token string
	// Slots receives the activated policies.
	Slots Slots
	// Limits bound every module; zero fields take their defaults.
	Limits Limits
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Telemetry, if set, feeds GPU readings to modules that export
	// kvmesh_telemetry.
	Telemetry *TelemetryFeed
}

// Manager validates, stores, activates and rolls back policy modules, and
// puts the active ones back into service when the agent restarts.
type Manager struct {
	cfg     ManagerConfig
	log     *slog.Logger
	rt      *Runtime
	metrics *Metrics

	mu      sync.Mutex
	state   managerState
	active  map[slotKey]*activeBinding
	modules map[string]*Module // compiled modules an active binding uses
	cluster clusterState       // manager_cluster.go
}

// slotKey names one slot: "admission", "prefetch", "eviction/memory" or
// "eviction/disk".
type slotKey string

func keyOf(s Slot, t Tier) slotKey {
	if s == SlotEviction {
		return slotKey("eviction/" + t.String())
	}
	return slotKey(s.String())
}

var allSlotKeys = []struct {
	key  slotKey
	slot Slot
	tier Tier
}{
	{keyOf(SlotAdmission, TierMemory), SlotAdmission, TierMemory},
	{keyOf(SlotEviction, TierMemory), SlotEviction, TierMemory},
	{keyOf(SlotEviction, TierDisk), SlotEviction, TierDisk},
	{keyOf(SlotPrefetch, TierMemory), SlotPrefetch, TierMemory},
}

// managerState is state.json.
type managerState struct {
	Slots   map[slotKey]*slotState `json:"slots"`
	Modules map[string]moduleInfo  `json:"modules"`
	// Clock is the Lamport clock that versions activations: the highest
	// version this manager has issued or heard of.
	Clock uint64 `json:"clock,omitempty"`
}

type slotState struct {
	Active  string   `json:"active,omitempty"`  // digest; "" is the native policy
	History []string `json:"history,omitempty"` // earlier actives, oldest first
	Since   string   `json:"since,omitempty"`   // RFC 3339 time of activation
	// Version and Origin identify the activation record Active came
	// from (Record); 0 for a slot never changed.
	Version uint64 `json:"version,omitempty"`
	Origin  string `json:"origin,omitempty"`
	// Rollback is set when that record was made by a rollback.
	Rollback bool `json:"rollback,omitempty"`
	// Refused is a newer record from another agent that failed
	// validation here; the slot kept Active. Nil when none.
	Refused *Refusal `json:"refused,omitempty"`
}

type moduleInfo struct {
	Size     int      `json:"size"`
	Slots    []string `json:"slots"`
	Uploaded string   `json:"uploaded"`
	From     string   `json:"from,omitempty"` // the agent it was fetched from; "" uploaded here
}

// maxHistory bounds how far back rollbacks reach.
const maxHistory = 8

type activeBinding struct {
	digest  string
	close   func()
	err     func() error
	failure error // set when re-activation at start-up failed
}

// NewManager opens (or creates) the policy directory and re-activates the
// modules that were active when the agent last stopped; a module that no
// longer validates leaves its slot on the native policy and says why in
// the listing.
func NewManager(ctx context.Context, cfg ManagerConfig) (*Manager, error) {
	if cfg.Dir == "" || cfg.Slots == nil {
		return nil, errors.New("policy manager needs a directory and the store's slots")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "modules"), 0o755); err != nil {
		return nil, err
	}
	rt, err := NewRuntime(ctx, filepath.Join(cfg.Dir, "cache"), cfg.Limits)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "policy"),
		rt:      rt,
		metrics: NewMetrics(),
		state:   managerState{Slots: map[slotKey]*slotState{}, Modules: map[string]moduleInfo{}},
		active:  map[slotKey]*activeBinding{},
		modules: map[string]*Module{},
		cluster: newClusterState(),
	}
	if err := m.loadState(); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	for _, st := range m.state.Slots {
		m.state.Clock = max(m.state.Clock, st.Version)
		if st.Refused != nil {
			m.state.Clock = max(m.state.Clock, st.Refused.Version)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range allSlotKeys {
		st := m.state.Slots[s.key]
		if st == nil || st.Active == "" {
			continue
		}
		if err := m.activate(ctx, s.slot, s.tier, st.Active); err != nil {
			m.log.Error("policy not re-activated; the slot uses the native policy", "slot", s.key, "module", st.Active, "err", err)
			m.active[s.key] = &activeBinding{digest: st.Active, close: func() {}, err: func() error { return nil }, failure: err}
			continue
		}
		m.log.Info("policy re-activated", "slot", s.key, "module", st.Active)
	}
	return m, nil
}

// Metrics is the collector of the calls, failures and fallbacks of every
// module the manager runs; register it with the agent's registry.
func (m *Manager) Metrics() *Metrics { return m.metrics }

// Close puts every slot back on its native policy and releases the
// modules.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range allSlotKeys {
		if m.active[s.key] != nil {
			m.restoreNative(s.slot, s.tier)
			m.active[s.key].close()
			delete(m.active, s.key)
		}
	}
	for d, mod := range m.modules {
		mod.Close(ctx)
		delete(m.modules, d)
	}
	return m.rt.Close(ctx)
}

// Push validates wasm (compiles, ABI version, dry run), stores it and
// activates it in the slot, remembering the module it replaces for
// Rollback. It returns the module's digest. In a cluster the activation
// then reaches every agent (SetCluster).
func (m *Manager) Push(ctx context.Context, wasm []byte, slot Slot, tier Tier) (string, error) {
	rec, err := m.push(ctx, wasm, slot, tier)
	return rec.Module, err
}

func (m *Manager) push(ctx context.Context, wasm []byte, slot Slot, tier Tier) (Record, error) {
	if slot != SlotEviction && tier != TierMemory {
		return Record{}, &RequestError{fmt.Errorf("a tier applies to the eviction slot only")}
	}
	mod, err := m.validate(ctx, wasm, slot)
	if err != nil {
		return Record{}, &RequestError{err}
	}
	digest := mod.Digest()

	var rec Record
	defer func() { m.announce(rec) }() // after the unlock below
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.store(ctx, mod, wasm, ""); err != nil {
		return Record{}, err
	}
	key := keyOf(slot, tier)
	if err := m.activate(ctx, slot, tier, digest); err != nil {
		m.closeUnused(ctx)
		return Record{}, err
	}
	rec = m.install(key, digest, false, m.issue(key))
	m.log.Info("policy activated", "slot", key, "module", digest, "version", rec.Version)
	return rec, m.saveState()
}

// validate compiles wasm and checks it as an upload is checked: ABI,
// the slot, a dry run. The caller closes the module.
func (m *Manager) validate(ctx context.Context, wasm []byte, slot Slot) (*Module, error) {
	mod, err := m.rt.Compile(ctx, wasm)
	if err != nil {
		return nil, err
	}
	if !mod.Implements(slot) {
		mod.Close(ctx)
		return nil, fmt.Errorf("module does not implement the %s slot (it implements %v)", slot, mod.Slots())
	}
	if err := mod.DryRun(ctx); err != nil {
		mod.Close(ctx)
		return nil, err
	}
	return mod, nil
}

// store writes a validated module under its digest and keeps it compiled
// (closing mod if an equal one is); m.mu must be held.
func (m *Manager) store(ctx context.Context, mod *Module, wasm []byte, from string) error {
	digest := mod.Digest()
	if err := writeFileAtomic(m.modulePath(digest), wasm); err != nil {
		mod.Close(ctx)
		return err
	}
	if known := m.modules[digest]; known != nil {
		mod.Close(ctx)
	} else {
		m.modules[digest] = mod
	}
	names := make([]string, 0, 3)
	for _, s := range mod.Slots() {
		names = append(names, s.String())
	}
	m.state.Modules[digest] = moduleInfo{Size: len(wasm), Slots: names, Uploaded: time.Now().UTC().Format(time.RFC3339), From: from}
	return nil
}

// install records digest as the slot's active module under rec (whose
// Module and Rollback it sets): a push remembers the module it replaces
// for rollbacks, a rollback forgets the entry it went back to. m.mu must
// be held.
func (m *Manager) install(key slotKey, digest string, rollback bool, rec Record) Record {
	st := m.slotState(key)
	switch {
	case rollback:
		if n := len(st.History); n > 0 && st.History[n-1] == digest {
			st.History = st.History[:n-1]
		}
	case st.Active != digest:
		st.History = append(st.History, st.Active)
		if len(st.History) > maxHistory {
			st.History = st.History[len(st.History)-maxHistory:]
		}
	}
	st.Active, st.Since = digest, time.Now().UTC().Format(time.RFC3339)
	st.Version, st.Origin, st.Rollback, st.Refused = rec.Version, rec.Origin, rollback, nil
	rec.Module, rec.Rollback = digest, rollback
	return rec
}

// Rollback re-activates the module the slot had before its current one,
// or its native policy if it had none. It returns the digest now active
// ("" for native).
func (m *Manager) Rollback(ctx context.Context, slot Slot, tier Tier) (string, error) {
	rec, err := m.rollback(ctx, slot, tier)
	return rec.Module, err
}

func (m *Manager) rollback(ctx context.Context, slot Slot, tier Tier) (Record, error) {
	if slot != SlotEviction && tier != TierMemory {
		return Record{}, &RequestError{fmt.Errorf("a tier applies to the eviction slot only")}
	}
	var rec Record
	defer func() { m.announce(rec) }() // after the unlock below
	m.mu.Lock()
	defer m.mu.Unlock()
	key := keyOf(slot, tier)
	st := m.slotState(key)
	if st.Active == "" && len(st.History) == 0 {
		return Record{}, &RequestError{fmt.Errorf("slot %s runs its native policy and has nothing to roll back to", key)}
	}
	prev := ""
	if n := len(st.History); n > 0 {
		prev = st.History[n-1]
	}
	if prev == "" {
		m.deactivate(key, slot, tier)
	} else if err := m.activate(ctx, slot, tier, prev); err != nil {
		return Record{}, fmt.Errorf("rolling %s back to %s: %w", key, prev, err)
	}
	rec = m.install(key, prev, true, m.issue(key))
	m.log.Info("policy rolled back", "slot", key, "module", prev, "version", rec.Version)
	return rec, m.saveState()
}

// activate binds module digest (compiling it from the store if needed) to
// the slot and swaps it in; m.mu must be held.
func (m *Manager) activate(ctx context.Context, slot Slot, tier Tier, digest string) error {
	mod := m.modules[digest]
	if mod == nil {
		wasm, err := os.ReadFile(m.modulePath(digest))
		if err != nil {
			return err
		}
		if mod, err = m.rt.Compile(ctx, wasm); err != nil {
			return err
		}
		m.modules[digest] = mod
	}
	key := keyOf(slot, tier)
	cfg := BindConfig{Metrics: m.metrics, Telemetry: m.cfg.Telemetry, OnDisable: func(err error) {
		m.log.Error("policy module taken out of service; native policy answers", "slot", key, "module", digest, "err", err)
	}}
	var b *activeBinding
	switch slot {
	case SlotEviction:
		w, err := mod.NewEviction(ctx, tier, cfg)
		if err != nil {
			return err
		}
		m.cfg.Slots.SetEviction(tier, w)
		b = &activeBinding{digest: digest, close: w.Close, err: w.Err}
	case SlotAdmission:
		w, err := mod.NewAdmission(ctx, cfg)
		if err != nil {
			return err
		}
		m.cfg.Slots.SetAdmission(w)
		b = &activeBinding{digest: digest, close: w.Close, err: w.Err}
	case SlotPrefetch:
		w, err := mod.NewPrefetch(ctx, cfg)
		if err != nil {
			return err
		}
		m.cfg.Slots.SetPrefetch(w)
		b = &activeBinding{digest: digest, close: w.Close, err: w.Err}
	}
	if old := m.active[key]; old != nil {
		old.close()
	}
	m.active[key] = b
	m.closeUnused(ctx)
	return nil
}

// deactivate puts the slot back on its native policy; m.mu must be held.
func (m *Manager) deactivate(key slotKey, slot Slot, tier Tier) {
	m.restoreNative(slot, tier)
	if old := m.active[key]; old != nil {
		old.close()
		delete(m.active, key)
	}
	m.closeUnused(context.Background())
}

func (m *Manager) restoreNative(slot Slot, tier Tier) {
	switch slot {
	case SlotEviction:
		m.cfg.Slots.SetEviction(tier, nil)
	case SlotAdmission:
		m.cfg.Slots.SetAdmission(nil)
	case SlotPrefetch:
		m.cfg.Slots.SetPrefetch(nil)
	}
}

// closeUnused releases compiled modules no slot uses; m.mu must be held.
func (m *Manager) closeUnused(ctx context.Context) {
	used := map[string]bool{}
	for _, b := range m.active {
		used[b.digest] = true
	}
	for d, mod := range m.modules {
		if !used[d] {
			mod.Close(ctx)
			delete(m.modules, d)
		}
	}
}

// SlotStatus is one slot in the listing.
type SlotStatus struct {
	Slot    string   `json:"slot"`
	Tier    string   `json:"tier,omitempty"`
	Active  string   `json:"active,omitempty"` // module digest; empty: the native policy
	State   string   `json:"state"`            // native, serving or failed
	Error   string   `json:"error,omitempty"`  // why a failed module is out of service
	Since   string   `json:"since,omitempty"`
	History []string `json:"history,omitempty"` // what rollbacks go back to, most recent first ("" is native)
	// Version orders the slot's activations cluster-wide (a Lamport
	// clock; 0: never changed); Origin is the agent where the activation
	// (push or rollback) was made, "" in single-node mode.
	Version uint64 `json:"version,omitempty"`
	Origin  string `json:"origin,omitempty"`
	// Refused is a newer activation from another agent that failed
	// validation here: the slot kept its module.
	Refused *Refusal `json:"refused,omitempty"`
}

// ModuleStatus is one stored module in the listing.
type ModuleStatus struct {
	Digest   string   `json:"digest"`
	Size     int      `json:"size"`
	Slots    []string `json:"slots"`
	Uploaded string   `json:"uploaded"`
	From     string   `json:"from,omitempty"` // the agent it was fetched from; "" uploaded here
}

// Listing is what GET /v1/policies answers.
type Listing struct {
	ABIVersion int            `json:"abi_version"`
	Slots      []SlotStatus   `json:"slots"`
	Modules    []ModuleStatus `json:"modules"`
}

// List reports every slot and stored module.
func (m *Manager) List() Listing {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := Listing{ABIVersion: ABIVersion}
	for _, s := range allSlotKeys {
		st := m.slotState(s.key)
		ss := SlotStatus{Slot: s.slot.String(), Active: st.Active, State: "native", Since: st.Since,
			Version: st.Version, Origin: st.Origin, Refused: st.Refused}
		if s.slot == SlotEviction {
			ss.Tier = s.tier.String()
		}
		for i := len(st.History) - 1; i >= 0; i-- {
			ss.History = append(ss.History, st.History[i])
		}
		if b := m.active[s.key]; b != nil {
			ss.State = "serving"
			err := b.failure
			if err == nil {
				err = b.err()
			}
			if err != nil {
				ss.State, ss.Error = "failed", err.Error()
			}
		}
		out.Slots = append(out.Slots, ss)
	}
	for d, info := range m.state.Modules {
		out.Modules = append(out.Modules, ModuleStatus{Digest: d, Size: info.Size, Slots: info.Slots, Uploaded: info.Uploaded, From: info.From})
	}
	sort.Slice(out.Modules, func(i, j int) bool { return out.Modules[i].Uploaded < out.Modules[j].Uploaded })
	return out
}

func (m *Manager) slotState(k slotKey) *slotState {
	st := m.state.Slots[k]
	if st == nil {
		st = &slotState{}
		m.state.Slots[k] = st
	}
	return st
}

func (m *Manager) modulePath(digest string) string {
	return filepath.Join(m.cfg.Dir, "modules", digest+".wasm")
}

func (m *Manager) statePath() string { return filepath.Join(m.cfg.Dir, "state.json") }

func (m *Manager) loadState() error {
	b, err := os.ReadFile(m.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &m.state); err != nil {
		return fmt.Errorf("%s: %w", m.statePath(), err)
	}
	if m.state.Slots == nil {
		m.state.Slots = map[slotKey]*slotState{}
	}
	if m.state.Modules == nil {
		m.state.Modules = map[string]moduleInfo{}
	}
	return nil
}

func (m *Manager) saveState() error {
	b, err := json.MarshalIndent(m.state, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(m.statePath(), b)
}

// writeFileAtomic replaces path with data so that a crash leaves either
// the old or the new file, never a torn one.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// RequestError is a push or rollback refused because of what was asked
// (an invalid module, a wrong slot), not because of the agent.
type RequestError struct{ Err error }

func (e *RequestError) Error() string { return e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }
