// Package sdk is the guest side of the kvmesh policy ABI, version 1
// (docs/policy-abi.md), for policies written in Go and built with
// GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared.
//
// A policy implements one or more of Eviction, Admission and Prefetch and
// exports thin wrappers around the functions here with //go:wasmexport:
//
//	//go:wasmexport kvmesh_abi_version
//	func abiVersion() int32 { return sdk.ABIVersion }
//
//	//go:wasmexport kvmesh_buffer
//	func buffer(records int32) int32 { return sdk.Buffer(records) }
//
//	//go:wasmexport kvmesh_observe
//	func observe(n int32) int32 { return sdk.HandleObserve(guest, n) }
//
//	//go:wasmexport kvmesh_victims
//	func victims(max int32) int32 { return sdk.HandleVictims(guest, max) }
//
// The host writes batches of Event records into one exchange buffer that the
// guest allocates once, calls one export per batch and reads the answer back
// from the same buffer. Nothing here allocates per call once the buffer and
// the scratch slices have grown to their working size.
package sdk

import "unsafe"

// ABIVersion is the policy ABI this package speaks.
const ABIVersion = 1

// EventKind says what happened to a block.
type EventKind uint8

const (
	Insert EventKind = 1 // the block entered the tier
	Hit    EventKind = 2 // the block was read or found by a lookup in the tier
	Miss   EventKind = 3 // a lookup asked for the block and the tier did not hold it
	Remove EventKind = 4 // the block left the tier for good
	Demote EventKind = 5 // the block left the tier for the next one down
)

// Tier names a storage tier.
type Tier uint8

const (
	TierMemory Tier = 0
	TierDisk   Tier = 1
	TierRemote Tier = 2
)

// Event is one record of a batch, laid out exactly as the ABI's 48-byte
// little-endian event record so a batch is read in place.
type Event struct {
	Time     int64  // unix nanoseconds (trace time in a replay)
	ID       uint64 // the block; never 0 in Insert, Hit, Remove and Demote
	Parent   uint64 // previous block of its token chain; 0 if unknown
	Size     uint64 // bytes (tokens in a replay)
	Tokens   uint32 // tokens the block holds; 0 if unknown
	ChainPos uint32 // 0-based position in its token chain
	Kind     EventKind
	Tier     Tier
	_        [6]byte
}

// DiskWrite says when a new block is written to the disk tier.
type DiskWrite uint8

const (
	DiskOnEvict DiskWrite = 0 // demoted to disk when memory evicts it
	DiskNow     DiskWrite = 1 // written to disk as it is stored
	DiskNever   DiskWrite = 2 // memory only
)

// Durability is how far a write must have gone before it is acknowledged.
type Durability uint8

const (
	DurableMemory     Durability = 0
	DurableDisk       Durability = 1
	DurableReplicated Durability = 2
)

// Decision is an admission verdict, laid out as the ABI's 4-byte record.
type Decision struct {
	Disk     DiskWrite
	Replicas uint8
	Ack      Durability
	_        uint8
}

// Eviction chooses which blocks leave a tier.
type Eviction interface {
	Observe(events []Event)
	Victims(dst []uint64, max int) []uint64
}

// Admission decides, per new block, where it is written.
type Admission interface {
	Admit(inserts []Event, dst []Decision) []Decision
}

// Prefetch chooses blocks to warm into memory after a lookup.
type Prefetch interface {
	Prefetch(lookup []Event, dst []uint64) []uint64
}

const (
	eventSize    = 48
	decisionSize = 4
)

var (
	exchange     []Event // the buffer shared with the host
	idScratch    []uint64
	decisScratch []Decision
)

// Buffer allocates the exchange buffer for records events and returns its
// address in linear memory. The host calls it once, before any batch.
func Buffer(records int32) int32 {
	if records <= 0 {
		return -1
	}
	exchange = make([]Event, records)
	return int32(uintptr(unsafe.Pointer(&exchange[0])))
}

// Events is the batch of n records the host has just written. It aliases
// the exchange buffer: keep no reference to it after the call returns.
func Events(n int32) []Event {
	if n < 0 || int(n) > len(exchange) {
		return nil
	}
	return exchange[:n]
}

// idCapacity is how many block ids fit in the exchange buffer.
func idCapacity() int { return len(exchange) * eventSize / 8 }

// putIDs copies ids into the exchange buffer and returns how many the
// host should read: all of them, or -1 if they do not fit.
func putIDs(ids []uint64) int32 {
	if len(ids) > idCapacity() {
		return -1
	}
	if len(ids) > 0 {
		copy(unsafe.Slice((*uint64)(unsafe.Pointer(&exchange[0])), idCapacity()), ids)
	}
	return int32(len(ids))
}

// HandleObserve hands the batch of n events to p.
func HandleObserve(p Eviction, n int32) int32 {
	events := Events(n)
	if events == nil && n != 0 {
		return -1
	}
	p.Observe(events)
	return 0
}

// HandleVictims asks p for up to max victims and writes them to the buffer.
func HandleVictims(p Eviction, max int32) int32 {
	if max < 0 {
		return -1
	}
	idScratch = p.Victims(idScratch[:0], int(max))
	return putIDs(idScratch)
}

// HandleAdmit asks p for one decision per insert in the batch of n events and
// writes them to the buffer.
func HandleAdmit(p Admission, n int32) int32 {
	events := Events(n)
	if events == nil && n != 0 {
		return -1
	}
	decisScratch = p.Admit(events, decisScratch[:0])
	if len(decisScratch)*decisionSize > len(exchange)*eventSize {
		return -1
	}
	if len(decisScratch) > 0 {
		copy(unsafe.Slice((*Decision)(unsafe.Pointer(&exchange[0])), len(exchange)*eventSize/decisionSize), decisScratch)
	}
	return int32(len(decisScratch))
}

// HandlePrefetch asks p which blocks to warm after the lookup batch of n events
// and writes their ids to the buffer.
func HandlePrefetch(p Prefetch, n int32) int32 {
	events := Events(n)
	if events == nil && n != 0 {
		return -1
	}
	idScratch = p.Prefetch(events, idScratch[:0])
	return putIDs(idScratch)
}
