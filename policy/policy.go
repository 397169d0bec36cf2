// Package policy holds the decisions that set the cache's hit rate: which
// tier a new block is written to (admission), which blocks leave a tier
// (eviction) and which blocks are warmed before they are asked for
// (prefetch).
//
// Each decision is a small interface fed batches of fixed-size Events, so a
// WebAssembly module (see docs/policy-abi.md) can stand in for the native
// implementations here slot by slot. Implementations need not be safe for
// concurrent use: the store serialises every call to one policy value.
package policy

// Tier names a storage tier.
type Tier uint8

const (
	TierMemory Tier = 0
	TierDisk   Tier = 1
	TierRemote Tier = 2
)

func (t Tier) String() string {
	switch t {
	case TierMemory:
		return "memory"
	case TierDisk:
		return "disk"
	case TierRemote:
		return "remote"
	}
	return "unknown"
}

// EventKind says what happened to a block.
type EventKind uint8

const (
	// EventInsert: the block entered the tier.
	EventInsert EventKind = 1
	// EventHit: the block was read (or found by a lookup) in the tier.
	EventHit EventKind = 2
	// EventMiss: a lookup asked for the block and the tier did not hold it.
	EventMiss EventKind = 3
	// EventRemove: the block left the tier for good (removed, replaced, evicted).
	EventRemove EventKind = 4
	// EventDemote: the block left this tier for the next one down.
	EventDemote EventKind = 5
)

func (k EventKind) String() string {
	switch k {
	case EventInsert:
		return "insert"
	case EventHit:
		return "hit"
	case EventMiss:
		return "miss"
	case EventRemove:
		return "remove"
	case EventDemote:
		return "demote"
	}
	return "unknown"
}

// Event is one thing that happened to one block, as a policy sees it.
// Block ids are assigned by the store, are never 0 and are never reused
// within one agent's lifetime.
type Event struct {
	Time     int64  // unix nanoseconds (trace time in a replay)
	ID       uint64 // the block
	Parent   uint64 // the previous block of its token chain; 0 if unknown
	Size     uint64 // bytes
	Tokens   uint32 // tokens the block holds; 0 if unknown
	ChainPos uint32 // 0-based position in its token chain; 0 if unknown
	Kind     EventKind
	Tier     Tier
}

// Eviction chooses which blocks leave one tier.
type Eviction interface {
	// Observe is told, in order, what happened to blocks of the tier.
	Observe(events []Event)
	// Victims appends to dst up to max block ids, best victim first. The
	// store skips ids it cannot evict now (leased, pinned, unknown) and
	// reports a Remove or Demote event for each block it does evict.
	Victims(dst []uint64, max int) []uint64
}

// Admission decides, per new block, where it is written and when the write
// is acknowledged.
type Admission interface {
	// Admit appends one Decision to dst for each event in inserts (all of
	// kind EventInsert, tier memory), in order.
	Admit(inserts []Event, dst []Decision) []Decision
}

// Prefetch chooses blocks to warm into memory ahead of the reads a lookup
// announces.
type Prefetch interface {
	// Prefetch is given one event per key of a looked-up chain, in chain
	// order: EventHit with the tier holding the block, or EventMiss (ID 0
	// when the store has never seen the key). It appends to dst the ids of
	// blocks to warm into memory.
	Prefetch(lookup []Event, dst []uint64) []uint64
}

// Durability is how far a write must have gone before it is acknowledged.
type Durability uint8

const (
	DurableMemory     Durability = 0 // in the agent's memory
	DurableDisk       Durability = 1 // fsync'd on local disk
	DurableReplicated Durability = 2 // held by the block's replica owners
)

func (d Durability) String() string {
	switch d {
	case DurableMemory:
		return "memory"
	case DurableDisk:
		return "disk"
	case DurableReplicated:
		return "replicated"
	}
	return "unknown"
}

// DiskWrite says when a block is written to the disk tier.
type DiskWrite uint8

const (
	DiskOnEvict DiskWrite = 0 // write-back: demoted to disk when memory evicts it
	DiskNow     DiskWrite = 1 // write-through: written to disk as it is stored
	DiskNever   DiskWrite = 2 // memory only: gone when memory evicts it
)

// Decision is an admission verdict for one new block.
type Decision struct {
	Disk     DiskWrite
	Replicas uint8      // remote copies wanted beyond this node: the mesh places the block on max(R, 1+Replicas) owners
	Ack      Durability // floor on acknowledgement; the client may ask for more
}
