package policy

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// BindConfig is how a binding reports on itself.
type BindConfig struct {
	// Metrics counts calls, failures and fallbacks; nil counts nothing.
	Metrics *Metrics
	// OnDisable, if set, is called once when the module is taken out of
	// service, with the reason, on the goroutine of the failing call.
	OnDisable func(err error)
	// Telemetry, if set, is where the binding finds GPU readings for a
	// module that exports kvmesh_telemetry.
	Telemetry *TelemetryFeed
}

// binding is the part the three slot adapters share: the instance they
// own and the switch to the native fallback. A failed call (trap, deadline,
// memory exhaustion, nonsense answer) disables the module for good; from
// that call on the native policy answers. Admission and prefetch policies
// keep no state; the eviction adapter keeps a table of the tier's blocks
// and their last use, from which it builds the native LRU when it first
// needs it (see residentSet), so the LRU answers as if it had been in
// service from the start.
type binding struct {
	mu       sync.Mutex // serialises calls with Close
	in       *instance
	label    string
	cfg      BindConfig
	calls    prometheus.Counter
	disabled bool
	failure  atomic.Pointer[error]
	// telemetrySeq is the feed sample the guest was last given.
	telemetrySeq uint64
}

func (m *Module) bind(ctx context.Context, s Slot, t Tier, cfg BindConfig) (*binding, error) {
	if !m.slots[s] {
		return nil, fmt.Errorf("module does not implement the %s slot", s)
	}
	in, err := m.acquire(ctx)
	if err != nil {
		return nil, err
	}
	b := &binding{in: in, label: slotLabel(s, t), cfg: cfg}
	if cfg.Metrics != nil {
		b.calls = cfg.Metrics.calls.WithLabelValues(b.label)
	}
	return b, nil
}

// call runs an export; it must be called with b.mu held and b enabled.
func (b *binding) call(name string, arg int32) (int32, error) {
	if b.calls != nil {
		b.calls.Inc()
	}
	return b.in.call(name, arg)
}

// fail takes the module out of service; b.mu must be held.
func (b *binding) fail(err error) {
	if b.disabled {
		return
	}
	b.disabled = true
	b.failure.Store(&err)
	if b.cfg.Metrics != nil {
		b.cfg.Metrics.failures.WithLabelValues(b.label, failureReason(err)).Inc()
		b.cfg.Metrics.fallbacks.WithLabelValues(b.label).Inc()
	}
	b.in.close(context.Background())
	if b.cfg.OnDisable != nil {
		b.cfg.OnDisable(err)
	}
}

func (b *binding) answer(format string, args ...any) error {
	return &callError{reasonAnswer, fmt.Errorf(format, args...)}
}

// Err is why the module was taken out of service, nil while it serves.
func (b *binding) Err() error {
	if p := b.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// Close releases the module's instance; the native policy answers from
// then on.
func (b *binding) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.disabled {
		b.disabled = true
		b.in.close(context.Background())
	}
}

// writeEvents copies events into the exchange buffer from record at on
// (they must fit) and advances the guest's clock to the newest of them.
func (b *binding) writeEvents(at int, events []Event) {
	buf := b.in.buffer()[at*eventRecordSize:]
	for i := range events {
		e := &events[i]
		putEvent(buf[i*eventRecordSize:], e)
		b.in.state.now = max(b.in.state.now, e.Time)
	}
}

// WasmEviction runs a module's eviction exports for one tier, backed by a
// native LRU. Observed events are gathered in the guest's buffer and
// handed over when it is full or when victims are asked for, so a call
// carries as many events as the buffer holds. Meanwhile the adapter only
// keeps the tier's blocks and their last use (held): enough to check every
// answer, and to build the native LRU, in the order an LRU fed every event
// would have, once the module is out of service.
type WasmEviction struct {
	*binding
	held     *residentSet // the tier's blocks, until fallback is built
	fallback *LRU         // built from held on first use once the module is out of service
	pending  int          // events in the buffer not yet observed by the guest
}

// NewEviction binds the module's eviction policy to tier.
func (m *Module) NewEviction(ctx context.Context, tier Tier, cfg BindConfig) (*WasmEviction, error) {
	b, err := m.bind(ctx, SlotEviction, tier, cfg)
	if err != nil {
		return nil, err
	}
	return &WasmEviction{binding: b, held: newResidentSet()}, nil
}

// native is the LRU that answers once the module is out of service; w.mu
// must be held.
func (w *WasmEviction) native() *LRU {
	if w.fallback == nil {
		w.fallback = w.held.lru()
		w.held = nil
	}
	return w.fallback
}

// Observe implements Eviction.
func (w *WasmEviction) Observe(events []Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.disabled {
		w.native().Observe(events)
		return
	}
	// The whole batch is recorded first: if a flush below fails, the
	// native LRU will be built with every event of it.
	w.held.observe(events)
	for len(events) > 0 && !w.disabled {
		if w.pending == 0 {
			if err := w.deliverTelemetry(); err != nil {
				w.fail(err)
				break
			}
		}
		n := min(len(events), w.in.records-w.pending)
		w.writeEvents(w.pending, events[:n])
		w.pending += n
		events = events[n:]
		if w.pending == w.in.records {
			w.flush()
		}
	}
}

// flush hands the gathered events to the guest; w.mu must be held.
func (w *WasmEviction) flush() {
	if w.pending == 0 || w.disabled {
		return
	}
	r, err := w.call(exportObserve, int32(w.pending))
	w.pending = 0
	if err == nil && r != 0 {
		err = w.answer("%s returned %d", exportObserve, r)
	}
	if err != nil {
		w.fail(err)
	}
}

// Victims implements Eviction. An answer must hold between min(max,
// blocks tracked) and max distinct ids of blocks the tier holds.
func (w *WasmEviction) Victims(dst []uint64, max int) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flush()
	if err := w.deliverTelemetry(); err != nil && !w.disabled {
		w.fail(err)
	}
	if w.disabled {
		return w.native().Victims(dst, max)
	}
	if max <= 0 {
		return dst
	}
	ask := min(max, w.in.records*eventRecordSize/idRecordSize)
	start := len(dst)
	dst, err := w.victims(dst, ask)
	if err != nil {
		w.fail(err)
		return w.native().Victims(dst[:start], max)
	}
	return dst
}

func (w *WasmEviction) victims(dst []uint64, ask int) ([]uint64, error) {
	n, err := w.call(exportVictims, int32(ask))
	if err != nil {
		return dst, err
	}
	if want := min(ask, w.held.len()); int(n) < want || int(n) > ask {
		return dst, w.answer("%s(%d) answered %d victims with %d blocks in the tier", exportVictims, ask, n, w.held.len())
	}
	buf := w.in.buffer()
	w.held.newAnswer()
	for i := range int(n) {
		id := binary.LittleEndian.Uint64(buf[i*idRecordSize:])
		held, dup := w.held.name(id)
		if !held {
			return dst, w.answer("%s answered block %d, which the tier does not hold", exportVictims, id)
		}
		if dup {
			return dst, w.answer("%s answered block %d twice", exportVictims, id)
		}
		dst = append(dst, id)
	}
	return dst, nil
}

// WasmAdmission runs a module's admission export, backed by the native
// WriteBack policy.
type WasmAdmission struct {
	*binding
	fallback WriteBack
}

// NewAdmission binds the module's admission policy.
func (m *Module) NewAdmission(ctx context.Context, cfg BindConfig) (*WasmAdmission, error) {
	b, err := m.bind(ctx, SlotAdmission, TierMemory, cfg)
	if err != nil {
		return nil, err
	}
	return &WasmAdmission{binding: b}, nil
}

// Admit implements Admission. The module must answer exactly one decision
// per insert, each inside the ABI's ranges.
func (w *WasmAdmission) Admit(inserts []Event, dst []Decision) []Decision {
	w.mu.Lock()
	defer w.mu.Unlock()
	start := len(dst)
	for rest := inserts; len(rest) > 0 && !w.disabled; {
		batch := rest[:min(len(rest), w.in.records)]
		rest = rest[len(batch):]
		var err error
		if dst, err = w.admit(batch, dst); err != nil {
			w.fail(err)
		}
	}
	if w.disabled {
		return w.fallback.Admit(inserts, dst[:start])
	}
	return dst
}

func (w *WasmAdmission) admit(batch []Event, dst []Decision) ([]Decision, error) {
	if err := w.deliverTelemetry(); err != nil {
		return dst, err
	}
	w.writeEvents(0, batch)
	n, err := w.call(exportAdmit, int32(len(batch)))
	if err != nil {
		return dst, err
	}
	if int(n) != len(batch) {
		return dst, w.answer("%s answered %d decisions for %d inserts", exportAdmit, n, len(batch))
	}
	buf := w.in.buffer()
	for i := range batch {
		d, err := readDecision(buf[i*decisionRecordSize:])
		if err != nil {
			return dst, w.answer("%s decision %d for block %d: %v", exportAdmit, i, batch[i].ID, err)
		}
		dst = append(dst, d)
	}
	return dst, nil
}

// WasmPrefetch runs a module's prefetch export, backed by the native
// WarmPrefix policy.
type WasmPrefetch struct {
	*binding
	fallback WarmPrefix
	known    *idWindow
	seen     map[uint64]struct{}
}

// knownPrefetchIDs is how many of the most recently looked-up block ids a
// prefetch answer may name: a module can only know of blocks it was told
// about.
const knownPrefetchIDs = 1 << 16

// NewPrefetch binds the module's prefetch policy.
func (m *Module) NewPrefetch(ctx context.Context, cfg BindConfig) (*WasmPrefetch, error) {
	b, err := m.bind(ctx, SlotPrefetch, TierMemory, cfg)
	if err != nil {
		return nil, err
	}
	return &WasmPrefetch{binding: b, known: newIDWindow(knownPrefetchIDs), seen: map[uint64]struct{}{}}, nil
}

// Prefetch implements Prefetch. The module may name only blocks that
// appeared in recent lookups, each once.
func (w *WasmPrefetch) Prefetch(lookup []Event, dst []uint64) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range lookup {
		if id := lookup[i].ID; id != 0 {
			w.known.add(id)
		}
	}
	start := len(dst)
	clear(w.seen)
	for rest := lookup; len(rest) > 0 && !w.disabled; {
		batch := rest[:min(len(rest), w.in.records)]
		rest = rest[len(batch):]
		var err error
		if dst, err = w.prefetch(batch, dst); err != nil {
			w.fail(err)
		}
	}
	if w.disabled {
		return w.fallback.Prefetch(lookup, dst[:start])
	}
	return dst
}

func (w *WasmPrefetch) prefetch(batch []Event, dst []uint64) ([]uint64, error) {
	if err := w.deliverTelemetry(); err != nil {
		return dst, err
	}
	w.writeEvents(0, batch)
	n, err := w.call(exportPrefetch, int32(len(batch)))
	if err != nil {
		return dst, err
	}
	if capacity := w.in.records * eventRecordSize / idRecordSize; n < 0 || int(n) > capacity {
		return dst, w.answer("%s answered %d blocks (at most %d fit the buffer)", exportPrefetch, n, capacity)
	}
	buf := w.in.buffer()
	for i := range int(n) {
		id := binary.LittleEndian.Uint64(buf[i*idRecordSize:])
		if !w.known.has(id) {
			return dst, w.answer("%s answered block %d, which no recent lookup named", exportPrefetch, id)
		}
		if _, dup := w.seen[id]; dup {
			return dst, w.answer("%s answered block %d twice", exportPrefetch, id)
		}
		w.seen[id] = struct{}{}
		dst = append(dst, id)
	}
	return dst, nil
}

// idWindow remembers the last n ids added.
type idWindow struct {
	ring  []uint64
	next  int
	count map[uint64]int32
}

func newIDWindow(n int) *idWindow {
	return &idWindow{ring: make([]uint64, n), count: map[uint64]int32{}}
}

func (w *idWindow) add(id uint64) {
	if old := w.ring[w.next]; old != 0 {
		if w.count[old]--; w.count[old] == 0 {
			delete(w.count, old)
		}
	}
	w.ring[w.next] = id
	w.next = (w.next + 1) % len(w.ring)
	w.count[id]++
}

func (w *idWindow) has(id uint64) bool { return w.count[id] > 0 }

var (
	_ Eviction  = (*WasmEviction)(nil)
	_ Admission = (*WasmAdmission)(nil)
	_ Prefetch  = (*WasmPrefetch)(nil)
)
