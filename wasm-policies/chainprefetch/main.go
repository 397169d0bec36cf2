// Command chainprefetch is a prefetch policy for token chains. Like the
// native policy it warms the disk-resident blocks of a lookup's leading
// run, which the reads that follow will want; and where an earlier lookup
// saw the chain go on past this one's end (a turn regenerated or resumed,
// a client reading ahead), it also warms that continuation, up to depth
// blocks, as far as it was on disk.
package main

import "github.com/kvmesh/kvmesh/wasm-policies/sdk"

const (
	depth = 16
	// window is how many lookup records the policy remembers; the host
	// accepts only ids of recent lookups, and remembers more than this.
	window = 1 << 15
)

// seen is what the last lookups said of a block.
type seen struct {
	child uint64 // the block that followed it in the latest chain; 0 if none
	tier  sdk.Tier
	hit   bool // held by the store when last looked up
}

type chainPrefetch struct {
	at    *sdk.IDTable // id -> index into blocks
	ids   []uint64     // ring of remembered ids, by index
	info  []seen
	next  int
	warm  *sdk.IDTable // ids already named in this answer
	chain []uint64
}

func newChainPrefetch() *chainPrefetch {
	return &chainPrefetch{at: sdk.NewIDTable(window), ids: make([]uint64, window), info: make([]seen, window), warm: sdk.NewIDTable(64)}
}

func (c *chainPrefetch) Prefetch(lookup []sdk.Event, dst []uint64) []uint64 {
	start := len(dst)
	defer func() {
		for _, id := range dst[start:] {
			c.warm.Delete(id)
		}
	}()
	leading := true
	for i := range lookup {
		e := &lookup[i]
		leading = leading && e.Kind == sdk.Hit
		if leading && e.Tier == sdk.TierDisk {
			dst = c.name(dst, e.ID)
		}
	}
	// Remember this chain before following an older one from its end.
	var prev uint64
	for i := range lookup {
		e := &lookup[i]
		if e.ID == 0 {
			prev = 0
			continue
		}
		c.record(e.ID, seen{tier: e.Tier, hit: e.Kind == sdk.Hit})
		if prev != 0 {
			c.linkChild(prev, e.ID)
		}
		prev = e.ID
	}
	if n := len(lookup); leading && n > 0 {
		id := lookup[n-1].ID
		for range depth {
			k, ok := c.at.Get(id)
			if !ok || c.info[k].child == 0 {
				break
			}
			id = c.info[k].child
			k, ok = c.at.Get(id)
			if !ok || !c.info[k].hit {
				break
			}
			if c.info[k].tier == sdk.TierDisk {
				dst = c.name(dst, id)
			}
		}
	}
	return dst
}

// name adds id to the answer once.
func (c *chainPrefetch) name(dst []uint64, id uint64) []uint64 {
	if _, dup := c.warm.Get(id); dup {
		return dst
	}
	c.warm.Put(id, 1)
	return append(dst, id)
}

// record notes what a lookup said of id, keeping its known child.
func (c *chainPrefetch) record(id uint64, s seen) {
	if k, ok := c.at.Get(id); ok {
		s.child = c.info[k].child
		c.at.Delete(id)
		c.ids[k] = 0
	}
	if old := c.ids[c.next]; old != 0 {
		c.at.Delete(old)
	}
	c.ids[c.next], c.info[c.next] = id, s
	c.at.Put(id, int32(c.next))
	c.next = (c.next + 1) % window
}

func (c *chainPrefetch) linkChild(parent, child uint64) {
	if k, ok := c.at.Get(parent); ok {
		c.info[k].child = child
	}
}

var guest = newChainPrefetch()

//go:wasmexport kvmesh_abi_version
func abiVersion() int32 { return sdk.ABIVersion }

//go:wasmexport kvmesh_buffer
func buffer(records int32) int32 { return sdk.Buffer(records) }

//go:wasmexport kvmesh_prefetch
func prefetch(n int32) int32 { return sdk.HandlePrefetch(guest, n) }

func main() {}
