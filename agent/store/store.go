// Package store is the agent's block store: one index over the memory and
// disk tiers, the operations engines call, and the policy slots that decide
// placement, eviction and prefetch.
//
// Invariants:
//   - A block is immutable. A Put of an existing key publishes a new block
//     (with a new disk version) and retires the old one.
//   - A block id names a key, not a version: the key keeps it across
//     replace, eviction and re-put while the store remembers the key
//     (ids.go), and no id ever names two keys.
//   - Storage of a block (its pages, its disk file) is released only when
//     the block has left the index and no read lease is outstanding, so a
//     reader never sees bytes being reused.
//   - A leased or pinned block is never chosen as an eviction victim.
//   - Every call into a policy happens with mu held, so policies need not be
//     safe for concurrent use.
package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvmesh/kvmesh/agent/disktier"
	"github.com/kvmesh/kvmesh/agent/keys"
	"github.com/kvmesh/kvmesh/agent/memtier"
	"github.com/kvmesh/kvmesh/policy"
)

// Config sizes the store. The zero value of an optional field takes the
// default named in its comment.
type Config struct {
	MemCapacity  uint64   // bytes of the memory arena (required)
	DiskCapacity uint64   // bytes of block files; 0 disables the disk tier
	DiskDir      string   // where block files live (required with a disk tier)
	MaxBlockSize uint64   // largest block accepted; default 64 MiB
	Namespaces   []string // namespaces served; default just "default"
	PageSize     uint64   // memory allocation unit; default memtier.DefaultPageSize
	// RememberedKeys bounds how many keys without a stored block (evicted,
	// removed, or missed by a lookup) keep their block id (ids.go); 0:
	// DefaultGhostsPerBlock per block stored, at least MinGhosts; negative:
	// none.
	RememberedKeys int
	Logger         *slog.Logger
}

// DefaultMaxBlockSize bounds a block unless Config says otherwise.
const DefaultMaxBlockSize = 64 << 20

// eventBatch is how many events a tier buffers before handing them to its
// eviction policy: one call per batch keeps a WebAssembly policy's per-call
// cost off the per-block path.
const eventBatch = 256

// block is the index entry of one stored block. Fields are guarded by
// Store.mu; the bytes behind mem may be copied without it while a lease is
// held.
type block struct {
	id       uint64
	ns       string
	key      []byte
	parent   []byte
	parentID uint64
	size     uint64
	tokens   uint32
	chainPos uint32
	version  uint64 // disk file version
	crc      uint32 // valid once the block has been on disk
	hasCRC   bool

	mem      memtier.Alloc // nil: not in memory
	onDisk   bool
	diskFoot uint64
	admitted policy.Decision

	leases   int32
	pins     int32
	demoting bool
	dead     bool // left the index; storage goes with the last lease
	hits     uint64
	lastUsed int64
}

// Store is the block store.
type Store struct {
	cfg    Config
	log    *slog.Logger
	arena  *memtier.Arena
	disk   *disktier.Dir // nil: no disk tier
	nsSet  map[string]bool
	warmCh chan uint64
	done   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	blocks   map[string]*block // by indexKey(ns, key)
	byID     map[uint64]*block
	nextID   uint64 // the last block id handed out (ids.go)
	ghosts   ghosts // ids of keys remembered without a block
	version  uint64
	diskUsed uint64
	closed   bool

	admission policy.Admission
	eviction  [2]policy.Eviction // by tier
	prefetch  policy.Prefetch
	pending   [2][]policy.Event // events not yet given to eviction[tier]

	stats counters
}

// counters are the store's monotonic statistics.
type counters struct {
	hits, misses, evictions [2]atomic.Uint64 // by tier
	corrupt, demotions      atomic.Uint64
	diskWriteErrors         atomic.Uint64
	prefetched              atomic.Uint64
}

// New opens a store. With a disk tier it recovers the blocks found in
// DiskDir, dropping torn and corrupt files.
func New(cfg Config) (*Store, error) {
	if cfg.MaxBlockSize == 0 {
		cfg.MaxBlockSize = DefaultMaxBlockSize
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = memtier.DefaultPageSize
	}
	if len(cfg.Namespaces) == 0 {
		cfg.Namespaces = []string{keys.DefaultNamespace}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{
		cfg:       cfg,
		log:       cfg.Logger,
		nsSet:     make(map[string]bool),
		warmCh:    make(chan uint64, 1024),
		done:      make(chan struct{}),
		blocks:    make(map[string]*block),
		byID:      make(map[uint64]*block),
		ghosts:    newGhosts(),
		version:   uint64(time.Now().UnixNano()),
		admission: policy.WriteBack{},
		eviction:  [2]policy.Eviction{policy.NewLRU(), policy.NewLRU()},
		prefetch:  policy.WarmPrefix{},
	}
	for _, ns := range cfg.Namespaces {
		if err := keys.ValidateNamespace(ns); err != nil {
			return nil, fmt.Errorf("namespace %q: %w", ns, err)
		}
		s.nsSet[ns] = true
	}
	arena, err := memtier.New(cfg.MemCapacity, cfg.PageSize)
	if err != nil {
		return nil, err
	}
	s.arena = arena
	if cfg.DiskCapacity > 0 {
		if cfg.DiskDir == "" {
			arena.Close()
			return nil, errors.New("disk tier: no directory given")
		}
		if s.disk, err = disktier.Open(filepath.Clean(cfg.DiskDir)); err != nil {
			arena.Close()
			return nil, err
		}
		if err := s.recover(); err != nil {
			arena.Close()
			return nil, err
		}
	}
	s.wg.Add(1)
	go s.warmLoop()
	return s, nil
}

// Close stops background work and releases the memory arena. Blocks on
// disk stay for the next start.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.byID {
		if b.leases > 0 {
			return fmt.Errorf("store closed with %d read leases outstanding", b.leases)
		}
	}
	return s.arena.Close()
}

// Namespaces lists the namespaces served.
func (s *Store) Namespaces() []string { return append([]string(nil), s.cfg.Namespaces...) }

// MaxBlockSize is the largest block accepted.
func (s *Store) MaxBlockSize() uint64 { return s.cfg.MaxBlockSize }

// indexKey names a block in the index; the length prefix keeps
// (ns, key) pairs apart whatever bytes the key holds.
func indexKey(ns string, key []byte) string {
	b := make([]byte, 0, binary.MaxVarintLen64+len(ns)+len(key))
	b = binary.AppendUvarint(b, uint64(len(ns)))
	b = append(b, ns...)
	b = append(b, key...)
	return string(b)
}

// checkNS resolves a request's namespace ("" is the default one).
func (s *Store) checkNS(ns string) (string, error) {
	if ns == "" {
		ns = keys.DefaultNamespace
	}
	if !s.nsSet[ns] {
		return ns, errorf(CodeUnknownNamespace, "namespace %q is not served by this agent (have %v)", ns, s.cfg.Namespaces)
	}
	return ns, nil
}

// check validates a request's namespace and key.
func (s *Store) check(ns string, key []byte) (string, error) {
	ns, err := s.checkNS(ns)
	if err != nil {
		return ns, err
	}
	if err := keys.Validate(key); err != nil {
		return ns, errorf(CodeInvalidKey, "%v", err)
	}
	return ns, nil
}

func (s *Store) now() int64 { return time.Now().UnixNano() }

func (b *block) event(kind policy.EventKind, tier policy.Tier, now int64) policy.Event {
	return policy.Event{Time: now, ID: b.id, Parent: b.parentID, Size: b.size,
		Tokens: b.tokens, ChainPos: b.chainPos, Kind: kind, Tier: tier}
}

// observe queues an event for the tier's eviction policy. mu held.
func (s *Store) observe(tier policy.Tier, ev policy.Event) {
	s.pending[tier] = append(s.pending[tier], ev)
	if len(s.pending[tier]) >= eventBatch {
		s.flush(tier)
	}
}

// flush hands a tier's queued events to its eviction policy. mu held.
func (s *Store) flush(tier policy.Tier) {
	if len(s.pending[tier]) == 0 {
		return
	}
	s.eviction[tier].Observe(s.pending[tier])
	s.pending[tier] = s.pending[tier][:0]
}

// SetAdmission installs an admission policy; nil restores the native one.
func (s *Store) SetAdmission(a policy.Admission) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a == nil {
		a = policy.WriteBack{}
	}
	s.admission = a
}

// SetPrefetch installs a prefetch policy; nil restores the native one.
func (s *Store) SetPrefetch(p policy.Prefetch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == nil {
		p = policy.WarmPrefix{}
	}
	s.prefetch = p
}

// SetEviction installs a tier's eviction policy (nil restores native LRU)
// and tells it, as insert events oldest first, about every block the tier
// holds now.
func (s *Store) SetEviction(tier policy.Tier, e policy.Eviction) {
	if tier != policy.TierMemory && tier != policy.TierDisk {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e == nil {
		e = policy.NewLRU()
	}
	s.flush(tier)
	resident := make([]*block, 0, len(s.byID))
	for _, b := range s.byID {
		if tier == policy.TierMemory && b.mem != nil || tier == policy.TierDisk && b.onDisk {
			resident = append(resident, b)
		}
	}
	sortByLastUsed(resident)
	evs := make([]policy.Event, 0, len(resident))
	for _, b := range resident {
		evs = append(evs, b.event(policy.EventInsert, tier, b.lastUsed))
	}
	e.Observe(evs)
	s.eviction[tier] = e
}
