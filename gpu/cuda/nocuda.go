//go:build !cuda

package cuda

import (
	"fmt"

	"github.com/kvmesh/kvmesh/gpu/layout"
)

var errNotBuilt = fmt.Errorf("%w: built without -tags cuda", ErrUnavailable)

// Cache is an engine's KV cache in device memory; without -tags cuda none
// can be opened.
type Cache struct{}

// Staging is a pinned host staging buffer; without -tags cuda none exists.
type Staging struct{}

// OpenIPC opens an engine's per-region allocations; see the cuda build.
func OpenIPC(device int, l layout.Layout, regions []IPCRegion) (*Cache, error) {
	return nil, errNotBuilt
}

// NewDeviceCache allocates a cache of layout l on device; see the cuda build.
func NewDeviceCache(device int, l layout.Layout) (*Cache, error) { return nil, errNotBuilt }

// Layout is the layout the cache was opened with.
func (c *Cache) Layout() layout.Layout { return layout.Layout{} }

// NewStaging allocates a staging buffer of slots slots for c.
func (c *Cache) NewStaging(slots, scratchSlots int) (*Staging, error) { return nil, errNotBuilt }

// Gather copies cache blocks into staging slots.
func (c *Cache) Gather(s *Staging, blocks, slots []int) error { return errNotBuilt }

// Scatter copies staging slots into cache blocks.
func (c *Cache) Scatter(s *Staging, blocks, slots []int) error { return errNotBuilt }

// Close releases the cache.
func (c *Cache) Close() error { return nil }

// Bytes is the pinned buffer: Slots() slots of the layout's SlotBytes().
func (s *Staging) Bytes() []byte { return nil }

// Slots is the number of slots the buffer holds.
func (s *Staging) Slots() int { return 0 }

// Close frees the buffer.
func (s *Staging) Close() error { return nil }

// BenchSwap times device gathers and scatters; see the cuda build.
func BenchSwap(l layout.Layout, blocks, reps int) (map[string]float64, error) {
	return nil, errNotBuilt
}
