// Command sighting is an admission policy that writes to disk only what is
// worth a disk write: a full block is written back when memory evicts it,
// while a partial last block (fewer tokens than the largest block seen) is
// kept in memory only until it is seen a second time. The next turn of a
// conversation extends a partial block, so its hash changes and the block
// is almost never asked for again; when one is, the second sighting earns
// it the disk.
package main

import "github.com/kvmesh/kvmesh/wasm-policies/sdk"

// window is how many recent insertions are remembered for the second
// sighting; it bounds the policy's memory (about 6 MB).
const window = 1 << 18

type sighting struct {
	seen   *sdk.IDTable // id -> 1, for the ids in order
	order  []uint64     // ring of the last window insertions
	next   int
	maxTok uint32
}

func newSighting() *sighting {
	return &sighting{seen: sdk.NewIDTable(window), order: make([]uint64, window)}
}

func (s *sighting) Admit(inserts []sdk.Event, dst []sdk.Decision) []sdk.Decision {
	for i := range inserts {
		e := &inserts[i]
		s.maxTok = max(s.maxTok, e.Tokens)
		_, again := s.seen.Get(e.ID)
		d := sdk.Decision{Disk: sdk.DiskOnEvict, Ack: sdk.DurableMemory}
		if e.Tokens < s.maxTok && !again {
			d.Disk = sdk.DiskNever
		}
		dst = append(dst, d)
		if !again {
			s.remember(e.ID)
		}
	}
	return dst
}

func (s *sighting) remember(id uint64) {
	if old := s.order[s.next]; old != 0 {
		s.seen.Delete(old)
	}
	s.order[s.next] = id
	s.next = (s.next + 1) % window
	s.seen.Put(id, 1)
}

var guest = newSighting()

//go:wasmexport kvmesh_abi_version
func abiVersion() int32 { return sdk.ABIVersion }

//go:wasmexport kvmesh_buffer
func buffer(records int32) int32 { return sdk.Buffer(records) }

//go:wasmexport kvmesh_admit
func admit(n int32) int32 { return sdk.HandleAdmit(guest, n) }

func main() {}
