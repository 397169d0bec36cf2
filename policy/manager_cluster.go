package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Cluster-wide policies. Every activation — a push or a rollback — is a
// Record: the slot, the module's digest and a version from a Lamport
// clock (one above the highest this manager has issued or heard of),
// ties broken by the name of the agent that made it. In a cluster the
// mesh gossips each slot's newest record and hands records it hears of to
// Apply, which fetches a module it lacks by digest, validates it as an
// upload is validated and activates it. Whatever order records arrive in,
// every agent ends on the newest one; a record that fails validation on
// an agent is remembered there as refused (the slot keeps its module), so
// it is neither retried nor able to hide an older record.

// Record is one activation of a module in a slot.
type Record struct {
	Slot     string `json:"slot"`             // "admission", "eviction/memory", "eviction/disk" or "prefetch"
	Module   string `json:"module,omitempty"` // hex SHA-256 of the module; "" is the native policy
	Version  uint64 `json:"version"`
	Origin   string `json:"origin,omitempty"`   // the agent where it was made
	Rollback bool   `json:"rollback,omitempty"` // made by a rollback: peers pop their history as the origin did
}

// After reports whether r supersedes o: a higher version, or the same
// version from an agent whose name sorts later.
func (r Record) After(o Record) bool {
	return r.Version > o.Version || r.Version == o.Version && r.Origin > o.Origin
}

// Refusal is a record that failed validation on this agent.
type Refusal struct {
	Module  string `json:"module"`
	Version uint64 `json:"version"`
	Origin  string `json:"origin,omitempty"`
	Error   string `json:"error"`
	At      string `json:"at"` // RFC 3339
}

// RefusedError is Apply's answer for a record whose module this agent
// will not run; it is remembered, so the record is not tried again.
type RefusedError struct {
	Record Record
	Err    error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("policy %s for %s (version %d from %q) refused: %v", short(e.Record.Module), e.Record.Slot, e.Record.Version, e.Record.Origin, e.Err)
}
func (e *RefusedError) Unwrap() error { return e.Err }

// Fetcher gets a module's bytes by digest from another agent and names
// that agent. Apply checks the bytes against the digest.
type Fetcher func(ctx context.Context, digest string) (wasm []byte, from string, err error)

// clusterState is the manager's part in the cluster.
type clusterState struct {
	self     string       // this agent's name, the origin of its records
	onChange func(Record) // told of every local push and rollback
	outcomes *prometheus.CounterVec
}

func newClusterState() clusterState {
	return clusterState{outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kvmesh", Subsystem: "policy", Name: "cluster_activations_total",
		Help: "Activations heard from other agents, by slot and outcome (applied, or refused: the module failed validation here).",
	}, []string{"slot", "outcome"})}
}

// ClusterMetrics counts the activations heard from other agents; register
// it with the agent's registry.
func (m *Manager) ClusterMetrics() prometheus.Collector { return m.cluster.outcomes }

// SetCluster names this agent (the origin of the records it makes) and
// sets the function told of every local push and rollback, to spread
// them. onChange is called without the manager's lock and must not block.
func (m *Manager) SetCluster(self string, onChange func(Record)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cluster.self, m.cluster.onChange = self, onChange
}

// announce tells the cluster hook of a local change; call it without m.mu.
func (m *Manager) announce(rec Record) {
	if rec.Version == 0 {
		return // nothing changed
	}
	m.mu.Lock()
	f := m.cluster.onChange
	m.mu.Unlock()
	if f != nil {
		f(rec)
	}
}

// issue is a new record for the slot, one version above any seen; m.mu
// must be held.
func (m *Manager) issue(key slotKey) Record {
	m.state.Clock++
	return Record{Slot: string(key), Version: m.state.Clock, Origin: m.cluster.self}
}

// current is the newest record the slot has taken: the active module's,
// or a newer one refused here; m.mu must be held.
func (m *Manager) current(key slotKey) Record {
	st := m.slotState(key)
	r := Record{Slot: string(key), Module: st.Active, Version: st.Version, Origin: st.Origin, Rollback: st.Rollback}
	if f := st.Refused; f != nil {
		if rr := (Record{Slot: string(key), Module: f.Module, Version: f.Version, Origin: f.Origin}); rr.After(r) {
			return rr
		}
	}
	return r
}

// Records are the slots' newest records (those ever changed), what this
// agent tells the cluster it has.
func (m *Manager) Records() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Record
	for _, s := range allSlotKeys {
		if r := m.current(s.key); r.Version > 0 {
			out = append(out, r)
		}
	}
	return out
}

// Newer reports whether rec supersedes what its slot has taken here, that
// is whether Apply would act on it.
func (m *Manager) Newer(rec Record) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := slotOf(rec.Slot); !ok {
		return false
	}
	return rec.After(m.current(slotKey(rec.Slot)))
}

// Observe advances the clock past a version heard of, so that the next
// local activation supersedes it.
func (m *Manager) Observe(version uint64) {
	m.mu.Lock()
	m.state.Clock = max(m.state.Clock, version)
	m.mu.Unlock()
}

// ModuleBytes returns a stored (validated) module by digest, for a peer
// that fetches it.
func (m *Manager) ModuleBytes(digest string) ([]byte, error) {
	if digest == "" || !validDigest(digest) {
		return nil, fmt.Errorf("%q is not a module digest", digest)
	}
	m.mu.Lock()
	_, ok := m.state.Modules[digest]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("module %s: %w", digest, os.ErrNotExist)
	}
	return os.ReadFile(m.modulePath(digest))
}

// Apply brings rec's slot to rec's module if rec supersedes what the slot
// has taken (and does nothing otherwise): a module not stored here comes
// from fetch, must match its digest, and is validated exactly as an
// upload (compile, ABI, slot, dry run) before it is stored and activated.
// A module that fails validation or activation is refused: the slot keeps
// its module, the refusal is logged, counted, listed and remembered, and
// the answer is a *RefusedError. Any other error (the fetch, the disk)
// changes nothing, so the record can be applied again later.
func (m *Manager) Apply(ctx context.Context, rec Record, fetch Fetcher) error {
	s, ok := slotOf(rec.Slot)
	if !ok {
		return fmt.Errorf("record for unknown slot %q", rec.Slot)
	}
	if !validDigest(rec.Module) {
		return fmt.Errorf("record for %s names %q, not a module digest", rec.Slot, rec.Module)
	}
	key := s.key
	m.mu.Lock()
	m.state.Clock = max(m.state.Clock, rec.Version)
	if !rec.After(m.current(key)) {
		m.mu.Unlock()
		return nil
	}
	have := rec.Module == "" || m.modules[rec.Module] != nil
	if !have {
		if _, known := m.state.Modules[rec.Module]; known {
			_, err := os.Stat(m.modulePath(rec.Module))
			have = err == nil
		}
	}
	m.mu.Unlock()

	var mod *Module
	var wasm []byte
	var from string
	if !have {
		if fetch == nil {
			return fmt.Errorf("module %s is not stored here", rec.Module)
		}
		var err error
		if wasm, from, err = fetch(ctx, rec.Module); err != nil {
			return fmt.Errorf("fetching module %s: %w", rec.Module, err)
		}
		if sum := sha256.Sum256(wasm); hex.EncodeToString(sum[:]) != rec.Module {
			return fmt.Errorf("module fetched from %s does not match its digest %s", from, rec.Module)
		}
		if mod, err = m.validate(ctx, wasm, s.slot); err != nil {
			return m.refuse(rec, err)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if !rec.After(m.current(key)) { // a newer one came first
		if mod != nil {
			mod.Close(ctx)
		}
		return nil
	}
	if mod != nil {
		if err := m.store(ctx, mod, wasm, from); err != nil {
			return err
		}
	}
	if b := m.active[key]; rec.Module != "" && b != nil && b.digest == rec.Module && b.failure == nil {
		// Already serving it (the same module pushed twice): keep its state.
	} else if rec.Module == "" {
		m.deactivate(key, s.slot, s.tier)
	} else if err := m.activate(ctx, s.slot, s.tier, rec.Module); err != nil {
		m.closeUnused(ctx)
		return m.refuseLocked(rec, err)
	}
	m.install(key, rec.Module, rec.Rollback, rec)
	m.cluster.outcomes.WithLabelValues(metricSlot(key), "applied").Inc()
	m.log.Info("policy activated from the cluster", "slot", key, "module", rec.Module, "version", rec.Version, "origin", rec.Origin, "rollback", rec.Rollback, "fetched_from", from)
	return m.saveState()
}

func (m *Manager) refuse(rec Record, err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !rec.After(m.current(slotKey(rec.Slot))) {
		return nil // superseded meanwhile: nothing to remember
	}
	return m.refuseLocked(rec, err)
}

// refuseLocked remembers rec as refused; m.mu must be held.
func (m *Manager) refuseLocked(rec Record, err error) error {
	key := slotKey(rec.Slot)
	m.slotState(key).Refused = &Refusal{Module: rec.Module, Version: rec.Version, Origin: rec.Origin, Error: err.Error(), At: time.Now().UTC().Format(time.RFC3339)}
	m.cluster.outcomes.WithLabelValues(metricSlot(key), "refused").Inc()
	m.log.Error("policy from the cluster refused; the slot keeps its module", "slot", key, "module", rec.Module, "version", rec.Version, "origin", rec.Origin, "kept", m.slotState(key).Active, "err", err)
	if serr := m.saveState(); serr != nil {
		m.log.Warn("policy state not saved", "err", serr)
	}
	return &RefusedError{Record: rec, Err: err}
}

// slotOf finds a slot by its key ("eviction/disk").
func slotOf(key string) (struct {
	key  slotKey
	slot Slot
	tier Tier
}, bool) {
	for _, s := range allSlotKeys {
		if string(s.key) == key {
			return s, true
		}
	}
	return allSlotKeys[0], false
}

// validDigest accepts "" (native) or 64 lower-case hex digits: a digest
// names a file, so nothing else may pass.
func validDigest(d string) bool {
	if d == "" {
		return true
	}
	if len(d) != 2*sha256.Size {
		return false
	}
	for _, c := range d {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func metricSlot(k slotKey) string { return strings.ReplaceAll(string(k), "/", "_") }

func short(d string) string {
	if d == "" {
		return "native"
	}
	return d[:min(12, len(d))]
}

// IsRefused reports whether err is Apply refusing a module.
func IsRefused(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}
