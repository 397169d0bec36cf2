//go:build cuda

package cuda

/*
#cgo LDFLAGS: -L${SRCDIR}/../../build/cuda -lkvmeshswap -lcudart_static -lstdc++ -ldl -lrt -lpthread -lm
#include "kvswap_cuda.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/kvmesh/kvmesh/gpu/layout"
	"github.com/kvmesh/kvmesh/gpu/swap"
)

// maxGridY is CUDA's limit on gridDim.y, which indexes regions.
const maxGridY = 65535

// Cache is an engine's KV cache in device memory: opened from IPC handles
// (the engine's own allocations) or allocated here (tests, benchmarks).
// Gather and Scatter may run concurrently with each other; Close waits for
// them and makes later calls fail with ErrClosed, so a cache unregistered in
// use never frees memory a copy is touching.
type Cache struct {
	mu      sync.RWMutex
	c       *C.kvc_cache
	layout  layout.Layout
	cleanup runtime.Cleanup
}

// Staging is a pinned host buffer of Slots() slots of the layout's
// SlotBytes(), with the device scratch, stream and event its copies use. One
// copy at a time runs on a Staging; Close frees all of it.
type Staging struct {
	mu      sync.Mutex
	s       *C.kvc_staging
	cache   *Cache
	host    []byte
	slots   int
	cleanup runtime.Cleanup
}

func cudaErr(what string, code C.int) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s", what, C.GoString(C.kvc_error_string(code)))
}

// deviceReady reports ErrUnavailable when no driver or device answers.
func deviceReady(device int) error {
	var count C.int
	if code := C.kvc_device_count(&count); code != 0 {
		return fmt.Errorf("%w: %v", ErrUnavailable, cudaErr("device count", code))
	}
	if device < 0 || device >= int(count) {
		return fmt.Errorf("%w: device %d of %d", ErrUnavailable, device, int(count))
	}
	return nil
}

// shape is a layout's region table in the form the C side copies.
type shape struct {
	chunk, slotOff []C.uint64_t
	c              C.kvc_shape
}

func newShape(l layout.Layout) (*shape, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	regions := l.Regions()
	if len(regions) > maxGridY {
		return nil, fmt.Errorf("%w: %d regions, at most %d", layout.ErrInvalid, len(regions), maxGridY)
	}
	s := &shape{chunk: make([]C.uint64_t, len(regions)), slotOff: make([]C.uint64_t, len(regions))}
	for i, r := range regions {
		s.chunk[i], s.slotOff[i] = C.uint64_t(r.Chunk), C.uint64_t(r.SlotOffset)
	}
	s.c = C.kvc_shape{
		nregions:   C.int64_t(len(regions)),
		chunk:      unsafe.SliceData(s.chunk),
		slot_off:   unsafe.SliceData(s.slotOff),
		blocks:     C.int64_t(l.Blocks),
		slot_bytes: C.uint64_t(l.SlotBytes()),
	}
	return s, nil
}

// call runs f with the shape pinned, since the C struct points into Go memory.
func (s *shape) call(f func(*C.kvc_shape) C.int) C.int {
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(unsafe.SliceData(s.chunk))
	pin.Pin(unsafe.SliceData(s.slotOff))
	return f(&s.c)
}

// OpenIPC opens the engine's allocations on device: regions[i] is region i
// of l.Regions(). Handles that repeat are opened once. A handle that does not
// open, or a region that does not fit inside its allocation, is an error and
// nothing stays open.
func OpenIPC(device int, l layout.Layout, regions []IPCRegion) (*Cache, error) {
	if err := deviceReady(device); err != nil {
		return nil, err
	}
	sh, err := newShape(l)
	if err != nil {
		return nil, err
	}
	if len(regions) != len(sh.chunk) {
		return nil, fmt.Errorf("%w: %d IPC regions, layout has %d", layout.ErrInvalid, len(regions), len(sh.chunk))
	}
	var handles []byte
	index := make([]C.int64_t, len(regions))
	offset := make([]C.uint64_t, len(regions))
	seen := map[IPCHandle]int{}
	for i, r := range regions {
		h, ok := seen[r.Handle]
		if !ok {
			h = len(seen)
			seen[r.Handle] = h
			handles = append(handles, r.Handle[:]...)
		}
		index[i], offset[i] = C.int64_t(h), C.uint64_t(r.Offset)
	}
	var (
		c   *C.kvc_cache
		bad C.int64_t
	)
	code := sh.call(func(shp *C.kvc_shape) C.int {
		return C.kvc_cache_open_ipc(C.int(device), shp, (*C.uint8_t)(unsafe.SliceData(handles)), C.int64_t(len(seen)),
			unsafe.SliceData(index), unsafe.SliceData(offset), &bad, &c)
	})
	if code != 0 {
		if bad >= 0 {
			r := l.Regions()[bad]
			return nil, fmt.Errorf("%w: layer %d %s region (offset %d, %d bytes) exceeds its IPC allocation",
				layout.ErrInvalid, r.Layer, r.Kind, regions[bad].Offset, l.RegionBytesOf(r.Kind))
		}
		return nil, cudaErr("opening IPC handles", code)
	}
	return newCache(c, l), nil
}

// NewDeviceCache allocates a cache of layout l on device.
func NewDeviceCache(device int, l layout.Layout) (*Cache, error) {
	if err := deviceReady(device); err != nil {
		return nil, err
	}
	sh, err := newShape(l)
	if err != nil {
		return nil, err
	}
	var c *C.kvc_cache
	if code := sh.call(func(shp *C.kvc_shape) C.int { return C.kvc_cache_alloc(C.int(device), shp, &c) }); code != 0 {
		return nil, cudaErr("allocating cache", code)
	}
	return newCache(c, l), nil
}

func newCache(c *C.kvc_cache, l layout.Layout) *Cache {
	cache := &Cache{c: c, layout: l}
	// A Cache dropped without Close still releases its device memory.
	cache.cleanup = runtime.AddCleanup(cache, func(c *C.kvc_cache) { C.kvc_cache_close(c) }, c)
	return cache
}

// Layout is the layout the cache was opened with.
func (c *Cache) Layout() layout.Layout { return c.layout }

// Close closes the IPC handles (or frees the allocation) after in-flight
// copies finish.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c == nil {
		return nil
	}
	c.cleanup.Stop()
	code := C.kvc_cache_close(c.c)
	c.c = nil
	return cudaErr("closing cache", code)
}

// NewStaging allocates slots pinned host slots for copies of c, with device
// scratch for scratchSlots of them: a batch moves in pieces of scratchSlots
// entries, one DMA per run of consecutive slots in each piece.
func (c *Cache) NewStaging(slots, scratchSlots int) (*Staging, error) {
	if slots <= 0 || scratchSlots <= 0 {
		return nil, fmt.Errorf("cuda: staging of %d slots with %d scratch slots", slots, scratchSlots)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, ErrClosed
	}
	var (
		s    *C.kvc_staging
		host *C.uint8_t
	)
	if code := C.kvc_staging_new(c.c, C.int64_t(slots), C.int64_t(scratchSlots), &s, &host); code != 0 {
		return nil, cudaErr("allocating staging", code)
	}
	st := &Staging{s: s, cache: c, slots: slots, host: unsafe.Slice((*byte)(unsafe.Pointer(host)), slots*c.layout.SlotBytes())}
	st.cleanup = runtime.AddCleanup(st, func(s *C.kvc_staging) { C.kvc_staging_free(s) }, s)
	return st, nil
}

// Bytes is the pinned buffer: slot i is Bytes()[i*SlotBytes():][:SlotBytes()],
// the K value then the V value. It must not be used after Close.
func (s *Staging) Bytes() []byte { return s.host }

// Slots is the number of slots the buffer holds.
func (s *Staging) Slots() int { return s.slots }

// Close waits for the copy in flight and frees the pinned buffer, the
// scratch, the stream and the event.
func (s *Staging) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return nil
	}
	s.cleanup.Stop()
	code := C.kvc_staging_free(s.s)
	s.s, s.host = nil, nil
	return cudaErr("freeing staging", code)
}

// Gather copies cache block blocks[i] into staging slot slots[i] for every i
// (device to host) and returns when the bytes are in s.Bytes().
func (c *Cache) Gather(s *Staging, blocks, slots []int) error {
	return c.run(swap.Gather, s, blocks, slots)
}

// Scatter copies staging slot slots[i] into cache block blocks[i] for every
// i (host to device) and returns when the cache holds them.
func (c *Cache) Scatter(s *Staging, blocks, slots []int) error {
	return c.run(swap.Scatter, s, blocks, slots)
}

func (c *Cache) run(dir swap.Direction, s *Staging, blocks, slots []int) error {
	if s.cache != c {
		return errors.New("cuda: staging belongs to another cache")
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.c == nil || s.s == nil {
		return ErrClosed
	}
	if _, err := swap.CheckBatch(dir, blocks, slots, c.layout.Blocks, s.slots); err != nil {
		return err
	}
	if len(blocks) == 0 {
		return nil
	}
	cb, cs := toC(blocks), toC(slots)
	var code C.int
	if dir == swap.Gather {
		code = C.kvc_gather(c.c, s.s, unsafe.SliceData(cb), unsafe.SliceData(cs), C.int64_t(len(cb)))
	} else {
		code = C.kvc_scatter(c.c, s.s, unsafe.SliceData(cb), unsafe.SliceData(cs), C.int64_t(len(cb)))
	}
	return cudaErr("swap", code)
}

func toC(vs []int) []C.int64_t {
	out := make([]C.int64_t, len(vs))
	for i, v := range vs {
		out[i] = C.int64_t(v)
	}
	return out
}
