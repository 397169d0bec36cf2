package replay

import (
	"fmt"
	"time"

	"github.com/kvmesh/kvmesh/policy"
)

// Config is one replay.
type Config struct {
	// CapacityTokens is the memory tier's size. Every block takes
	// BlockTokens of it, a partial last block included: KV pages are
	// allocated whole.
	CapacityTokens int64
	// DiskCapacityTokens is the disk tier's size; 0 replays memory only.
	DiskCapacityTokens int64
	// BlockTokens is the tokens per block of the trace (default 512).
	BlockTokens int
	// Eviction returns the eviction policy of a tier (a fresh one per
	// call).
	Eviction func(policy.Tier) (policy.Eviction, error)
	// Admission returns the admission policy of a two-tier replay; nil is
	// the native write-back policy.
	Admission func() (policy.Admission, error)
	// Progress, if set, is told every few hundred requests how far the
	// replay has got.
	Progress func(done, total int)
}

func (c Config) blockTokens() int64 {
	if c.BlockTokens <= 0 {
		return 512
	}
	return int64(c.BlockTokens)
}

// Result is what a replay measured.
type Result struct {
	Requests   int64
	Blocks     int64 // blocks asked for
	Hits       int64 // blocks found, in either tier, as part of their request's leading run
	MemoryHits int64
	DiskHits   int64
	// BlocksWrittenDisk counts writes to the disk tier: write-through at
	// admission and demotions of blocks not already there.
	BlocksWrittenDisk int64
	// Events is how many event records the policies were handed, and
	// PolicyTime how long their calls took (Victims included).
	Events     int64
	PolicyTime time.Duration
}

// HitRate is hit blocks over all blocks.
func (r Result) HitRate() float64 { return ratio(r.Hits, r.Blocks) }

// NsPerEvent is the policies' time per event handed to them.
func (r Result) NsPerEvent() float64 { return ratio(r.PolicyTime.Nanoseconds(), r.Events) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Run replays trace. Each request looks up its chain of blocks: the
// leading run present in memory or on disk is a hit (a prefix hit stops at
// the first miss). Then every block of the request is brought into memory,
// new ones first passed through admission; memory evicts (demoting to disk
// what admission asked for) and disk evicts as their policies choose.
//
// Each tier's eviction policy sees, per request: the lookup (EventHit for
// each block of the leading run the tier serves, EventInsert for a block it
// holds past the first miss, which the request writes again, EventMiss for
// a block it lacks), then one Victims call if the tier is short of room, an
// EventRemove or EventDemote per evicted block, and an EventInsert per
// block written to it. Events carry the request's time, the block's token
// count and its size (tokens, as a trace has no bytes); block ids are the
// trace's hash ids plus one, stable for the whole replay.
func Run(trace []Request, cfg Config) (Result, error) {
	s, err := newSim(cfg)
	if err != nil {
		return Result{}, err
	}
	for i := range trace {
		if err := s.request(&trace[i]); err != nil {
			return s.res, fmt.Errorf("request %d (t=%dms): %w", i, trace[i].Timestamp, err)
		}
		if cfg.Progress != nil && (i%256 == 0 || i == len(trace)-1) {
			cfg.Progress(i+1, len(trace))
		}
	}
	return s.res, nil
}

type sim struct {
	cfg      Config
	res      Result
	memCap   int
	diskCap  int
	memory   map[uint64]policy.DiskWrite // blocks in memory and what admission said of them
	disk     map[uint64]policy.DiskWrite // blocks on disk and what admission said of them
	memPol   policy.Eviction
	diskPol  policy.Eviction
	admit    policy.Admission
	scratch  scratch
	blockTok int64
}

// scratch holds the per-request buffers, reused.
type scratch struct {
	chain      []policy.Event
	inMem      []bool
	onDisk     []bool
	memEvents  []policy.Event
	diskEvents []policy.Event
	fresh      []policy.Event
	decisions  []policy.Decision
	victims    []uint64
	diskWrites []policy.Event
	inChain    map[uint64]bool // blocks of the request in hand
	taken      map[uint64]bool // victims of one eviction
}

func newSim(cfg Config) (*sim, error) {
	bt := cfg.blockTokens()
	s := &sim{
		cfg:      cfg,
		memCap:   int(cfg.CapacityTokens / bt),
		diskCap:  int(cfg.DiskCapacityTokens / bt),
		memory:   map[uint64]policy.DiskWrite{},
		disk:     map[uint64]policy.DiskWrite{},
		blockTok: bt,
	}
	s.scratch.inChain, s.scratch.taken = map[uint64]bool{}, map[uint64]bool{}
	if s.memCap < 1 {
		return nil, fmt.Errorf("capacity of %d tokens holds no %d-token block", cfg.CapacityTokens, bt)
	}
	var err error
	if s.memPol, err = cfg.Eviction(policy.TierMemory); err != nil {
		return nil, err
	}
	if s.diskCap > 0 {
		if s.diskPol, err = cfg.Eviction(policy.TierDisk); err != nil {
			return nil, err
		}
		s.admit = policy.WriteBack{}
		if cfg.Admission != nil {
			if s.admit, err = cfg.Admission(); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

func (s *sim) twoTier() bool { return s.diskCap > 0 }

func (s *sim) observe(p policy.Eviction, events []policy.Event) {
	if len(events) == 0 {
		return
	}
	t0 := time.Now()
	p.Observe(events)
	s.res.PolicyTime += time.Since(t0)
	s.res.Events += int64(len(events))
}

func (s *sim) request(r *Request) error {
	sc := &s.scratch
	n := len(r.HashIDs)
	s.res.Requests++
	s.res.Blocks += int64(n)
	now := r.Timestamp * int64(time.Millisecond)

	// The chain, and the lookup as each tier sees it.
	sc.chain, sc.inMem, sc.onDisk = sc.chain[:0], sc.inMem[:0], sc.onDisk[:0]
	sc.memEvents, sc.diskEvents = sc.memEvents[:0], sc.diskEvents[:0]
	clear(sc.inChain)
	prefix := true
	for i, h := range r.HashIDs {
		e := policy.Event{Time: now, ID: h + 1, ChainPos: uint32(i), Tokens: uint32(s.blockTok)}
		if i > 0 {
			e.Parent = r.HashIDs[i-1] + 1
		}
		if i == n-1 {
			e.Tokens = uint32(min(max(int64(r.InputLength)-s.blockTok*int64(n-1), 1), s.blockTok))
		}
		e.Size = uint64(e.Tokens)
		_, inMem := s.memory[e.ID]
		_, onDisk := s.disk[e.ID]
		hit := prefix && (inMem || onDisk)
		prefix = hit
		if hit {
			s.res.Hits++
			if inMem {
				s.res.MemoryHits++
			} else {
				s.res.DiskHits++
			}
		}
		sc.chain, sc.inMem, sc.onDisk = append(sc.chain, e), append(sc.inMem, inMem), append(sc.onDisk, onDisk)
		sc.inChain[e.ID] = true

		m := e
		switch {
		case inMem && hit:
			m.Kind = policy.EventHit
		case inMem:
			m.Kind = policy.EventInsert
		default:
			m.Kind = policy.EventMiss
		}
		sc.memEvents = append(sc.memEvents, m)
		if s.twoTier() && !inMem {
			d := e
			d.Tier = policy.TierDisk
			switch {
			case onDisk && hit:
				d.Kind = policy.EventHit
			case onDisk:
				continue // recomputed past the first miss: the disk copy is not read
			default:
				d.Kind = policy.EventMiss
			}
			sc.diskEvents = append(sc.diskEvents, d)
		}
	}
	s.observe(s.memPol, sc.memEvents)
	if s.twoTier() {
		s.observe(s.diskPol, sc.diskEvents)
	}

	// Admission of the blocks new to the store.
	sc.fresh, sc.diskWrites = sc.fresh[:0], sc.diskWrites[:0]
	absent, pinned := 0, 0
	for i := range sc.chain {
		if sc.inMem[i] {
			pinned++
			continue
		}
		absent++
		if s.twoTier() && !sc.onDisk[i] {
			e := sc.chain[i]
			e.Kind = policy.EventInsert
			sc.fresh = append(sc.fresh, e)
		}
	}
	sc.decisions = sc.decisions[:0]
	if len(sc.fresh) > 0 {
		t0 := time.Now()
		sc.decisions = s.admit.Admit(sc.fresh, sc.decisions)
		s.res.PolicyTime += time.Since(t0)
		s.res.Events += int64(len(sc.fresh))
		if len(sc.decisions) != len(sc.fresh) {
			return fmt.Errorf("admission answered %d decisions for %d blocks", len(sc.decisions), len(sc.fresh))
		}
	}

	// Room in memory: the request's own blocks are in use and stay.
	evicted, err := s.evict(s.memPol, len(s.memory)+absent-s.memCap, len(s.memory)-pinned, pinned, func(id uint64) bool {
		_, ok := s.memory[id]
		return ok
	})
	if err != nil {
		return fmt.Errorf("memory tier: %w", err)
	}
	sc.memEvents = sc.memEvents[:0]
	for _, id := range evicted {
		dw := s.memory[id]
		delete(s.memory, id)
		kind := policy.EventRemove
		if s.twoTier() {
			_, below := s.disk[id]
			if !below && dw == policy.DiskOnEvict {
				sc.diskWrites = append(sc.diskWrites, policy.Event{Time: now, ID: id, Kind: policy.EventInsert, Tier: policy.TierDisk})
				below = true
			}
			if below {
				kind = policy.EventDemote
			}
		}
		sc.memEvents = append(sc.memEvents, policy.Event{Time: now, ID: id, Kind: kind})
	}
	s.observe(s.memPol, sc.memEvents)

	// Into memory, in chain order; write-through blocks to disk as well.
	room := s.memCap - len(s.memory)
	sc.memEvents = sc.memEvents[:0]
	next := 0
	for i, e := range sc.chain {
		if sc.inMem[i] || room == 0 {
			continue
		}
		room--
		// A block promoted from disk keeps its copy there and what admission
		// said of it, as a store keeps both with the block: were the copy
		// dropped, a write-through block would not be written again.
		dw := s.disk[e.ID]
		if s.twoTier() && !sc.onDisk[i] {
			dw = sc.decisions[next].Disk
			next++
			if dw == policy.DiskNow {
				d := e
				d.Kind, d.Tier = policy.EventInsert, policy.TierDisk
				sc.diskWrites = append(sc.diskWrites, d)
			}
		}
		s.memory[e.ID] = dw
		e.Kind = policy.EventInsert
		sc.memEvents = append(sc.memEvents, e)
	}
	s.observe(s.memPol, sc.memEvents)
	if s.twoTier() {
		return s.writeDisk(sc.diskWrites)
	}
	return nil
}

// writeDisk makes room on disk and writes blocks there.
func (s *sim) writeDisk(writes []policy.Event) error {
	if len(writes) == 0 {
		return nil
	}
	sc := &s.scratch
	pinned := 0
	for i := range sc.chain {
		if sc.onDisk[i] {
			pinned++
		}
	}
	evicted, err := s.evict(s.diskPol, len(s.disk)+len(writes)-s.diskCap, len(s.disk)-pinned, pinned, func(id uint64) bool {
		_, ok := s.disk[id]
		return ok
	})
	if err != nil {
		return fmt.Errorf("disk tier: %w", err)
	}
	sc.diskEvents = sc.diskEvents[:0]
	for _, id := range evicted {
		delete(s.disk, id)
		sc.diskEvents = append(sc.diskEvents, policy.Event{Time: writes[0].Time, ID: id, Kind: policy.EventRemove, Tier: policy.TierDisk})
	}
	s.observe(s.diskPol, sc.diskEvents)
	room := s.diskCap - len(s.disk)
	if len(writes) > room {
		writes = writes[:room]
	}
	for _, w := range writes {
		dw, ok := s.memory[w.ID] // written through; otherwise demoted
		if !ok {
			dw = policy.DiskOnEvict
		}
		s.disk[w.ID] = dw
	}
	s.res.BlocksWrittenDisk += int64(len(writes))
	s.observe(s.diskPol, writes)
	return nil
}

// evict asks p for need victims among the evictable blocks of the tier,
// skipping the blocks of the request in hand (pinned of them are in the
// tier), as a store skips blocks in use. A request longer than the tier
// leaves it short of room: its blocks past the capacity are not kept.
func (s *sim) evict(p policy.Eviction, need, evictable, pinned int, held func(uint64) bool) ([]uint64, error) {
	need = min(need, evictable)
	if need <= 0 {
		return nil, nil
	}
	sc := &s.scratch
	t0 := time.Now()
	sc.victims = p.Victims(sc.victims[:0], need+pinned)
	s.res.PolicyTime += time.Since(t0)
	out := sc.victims[:0]
	clear(sc.taken)
	for _, id := range sc.victims {
		if len(out) == need {
			break
		}
		if !held(id) {
			return nil, fmt.Errorf("policy named block %d as a victim, which the tier does not hold", id)
		}
		if !sc.inChain[id] && !sc.taken[id] {
			sc.taken[id] = true
			out = append(out, id)
		}
	}
	if len(out) < need {
		return nil, fmt.Errorf("policy answered %d usable victims, %d were needed", len(out), need)
	}
	return out, nil
}
