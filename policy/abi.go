package policy

import (
	"encoding/binary"
	"fmt"
)

// ABIVersion is the version of the policy ABI this host speaks; a module's
// kvmesh_abi_version export must return it. docs/policy-abi.md is the
// reference for everything in this file.
const ABIVersion = 1

// The exports of a policy module.
const (
	exportABIVersion = "kvmesh_abi_version" // () -> i32
	exportBuffer     = "kvmesh_buffer"      // (records i32) -> address i32
	exportObserve    = "kvmesh_observe"     // (n i32) -> 0 | error < 0
	exportVictims    = "kvmesh_victims"     // (max i32) -> count | error < 0
	exportAdmit      = "kvmesh_admit"       // (n i32) -> count | error < 0
	exportPrefetch   = "kvmesh_prefetch"    // (n i32) -> count | error < 0
	exportTelemetry  = "kvmesh_telemetry"   // (n i32) -> 0 | error != 0; optional in every slot
	exportInitialize = "_initialize"        // reactor start, called once if present
	exportMemory     = "memory"
)

// Sizes of the records exchanged through the guest's buffer.
const (
	eventRecordSize    = 48
	decisionRecordSize = 4
	idRecordSize       = 8
)

// Slot is a place in the store where a policy takes effect.
type Slot uint8

const (
	SlotAdmission Slot = iota
	SlotEviction
	SlotPrefetch
)

func (s Slot) String() string {
	switch s {
	case SlotAdmission:
		return "admission"
	case SlotEviction:
		return "eviction"
	case SlotPrefetch:
		return "prefetch"
	}
	return "unknown"
}

// ParseSlot is the inverse of Slot.String.
func ParseSlot(s string) (Slot, error) {
	for _, v := range []Slot{SlotAdmission, SlotEviction, SlotPrefetch} {
		if v.String() == s {
			return v, nil
		}
	}
	return 0, fmt.Errorf("unknown slot %q (want admission, eviction or prefetch)", s)
}

// ParseTier is the inverse of Tier.String for the tiers a policy can evict.
func ParseTier(s string) (Tier, error) {
	switch s {
	case "memory":
		return TierMemory, nil
	case "disk":
		return TierDisk, nil
	}
	return 0, fmt.Errorf("unknown tier %q (want memory or disk)", s)
}

// putEvent writes e as one event record at the start of b.
//
//	offset size field
//	0      8    time (unix ns, signed)
//	8      8    id
//	16     8    parent id
//	24     8    size (bytes)
//	32     4    tokens
//	36     4    chain position
//	40     1    kind
//	41     1    tier
//	42     6    reserved, zero
func putEvent(b []byte, e *Event) {
	_ = b[eventRecordSize-1]
	binary.LittleEndian.PutUint64(b[0:], uint64(e.Time))
	binary.LittleEndian.PutUint64(b[8:], e.ID)
	binary.LittleEndian.PutUint64(b[16:], e.Parent)
	binary.LittleEndian.PutUint64(b[24:], e.Size)
	binary.LittleEndian.PutUint32(b[32:], e.Tokens)
	binary.LittleEndian.PutUint32(b[36:], e.ChainPos)
	b[40] = byte(e.Kind)
	b[41] = byte(e.Tier)
	binary.LittleEndian.PutUint16(b[42:], 0)
	binary.LittleEndian.PutUint32(b[44:], 0)
}

// maxReplicas bounds Decision.Replicas: more copies than any mesh has
// members is an answer no sane policy gives.
const maxReplicas = 16

// readDecision decodes the decision record at the start of b, refusing
// values outside the ABI's ranges.
func readDecision(b []byte) (Decision, error) {
	d := Decision{Disk: DiskWrite(b[0]), Replicas: b[1], Ack: Durability(b[2])}
	switch {
	case d.Disk > DiskNever:
		return d, fmt.Errorf("disk write mode %d out of range", b[0])
	case d.Replicas > maxReplicas:
		return d, fmt.Errorf("%d replicas, more than %d", b[1], maxReplicas)
	case d.Ack > DurableReplicated:
		return d, fmt.Errorf("durability %d out of range", b[2])
	case b[3] != 0:
		return d, fmt.Errorf("reserved byte is %d, want 0", b[3])
	}
	return d, nil
}
