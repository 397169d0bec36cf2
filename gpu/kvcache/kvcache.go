// Package kvcache is an engine's registered KV cache as the agent holds it:
// its layout, its tensor-parallel rank, and the memory the cache lives in —
// host memory (the engine's memfd, mapped by the agent) or device memory
// opened through CUDA IPC. Save and Load move whole blocks between that
// cache and the block store:
//
//	Save: gather blocks block-major into a staging buffer, then Put each
//	      block's K and V value under "{hash}_key_{rank}" / "{hash}_value_{rank}".
//	Load: Get each block's two values into a staging buffer, then scatter
//	      them into the requested block ids.
//
// A Cache never writes outside the registered regions: every block id is
// checked before any copy, and Close waits for the copies in flight.
package kvcache

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/kvmesh/kvmesh/gpu/cuda"
	"github.com/kvmesh/kvmesh/gpu/layout"
	"github.com/kvmesh/kvmesh/gpu/swap"
)

// Store is the part of the block store Save and Load use.
type Store interface {
	// Put stores value under key. value is a staging buffer that is reused
	// once Put returns: Put copies what it keeps.
	Put(ctx context.Context, key string, value []byte) error
	// Get copies the value under key into dst and returns its length; a
	// missing key is an error wrapping ErrNotFound.
	Get(ctx context.Context, key string, dst []byte) (int, error)
}

// ErrNotFound is what Store.Get wraps for a missing key.
var ErrNotFound = errors.New("kvcache: block not in store")

// ErrClosed is returned by Save and Load on a closed (unregistered) Cache.
var ErrClosed = errors.New("kvcache: cache unregistered")

// MissingError is Load's error when a block is not in the store: the blocks
// before Index were loaded, nothing at or after it was.
type MissingError struct {
	Index int    // position in the request of the first missing block
	Key   string // the stored key that was missing
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("kvcache: block %d of the request (%s) not in store", e.Index, e.Key)
}

func (e *MissingError) Unwrap() error { return ErrNotFound }

// stage is one staging buffer of a memory kind: Bytes() holds Slots() slots.
type stage interface {
	Bytes() []byte
	Gather(blocks, slots []int) error
	Scatter(blocks, slots []int) error
	Close() error
}

// Options sizes the staging a Cache keeps. Zero values take the defaults.
type Options struct {
	// StagingSlots is the blocks one staging buffer holds: the unit of one
	// gather or scatter call (default 16, 128 MiB for an 8 MiB block).
	StagingSlots int
	// Stagings is the number of buffers, so Saves and Loads that many deep
	// run at once (default 2).
	Stagings int
}

func (o Options) withDefaults() Options {
	if o.StagingSlots <= 0 {
		o.StagingSlots = 16
	}
	if o.Stagings <= 0 {
		o.Stagings = 2
	}
	return o
}

// Cache is one registered KV cache. Its methods are safe for concurrent use.
type Cache struct {
	layout layout.Layout
	rank   int
	stages chan stage // idle staging buffers
	closeM func() error

	mu     sync.RWMutex // held shared by Save and Load, exclusively by Close
	closed bool
}

func newCache(l layout.Layout, rank int, opts Options, newStage func(slots int) (stage, error), closeM func() error) (*Cache, error) {
	if rank < 0 {
		return nil, fmt.Errorf("kvcache: rank %d", rank)
	}
	opts = opts.withDefaults()
	c := &Cache{layout: l, rank: rank, stages: make(chan stage, opts.Stagings), closeM: closeM}
	for range opts.Stagings {
		st, err := newStage(min(opts.StagingSlots, l.Blocks))
		if err != nil {
			c.closeStages()
			if closeM != nil {
				closeM()
			}
			return nil, err
		}
		c.stages <- st
	}
	return c, nil
}

// NewHost registers a host-resident cache of layout l living in mem (the
// engine's memfd, mapped by the caller, who unmaps it only after Close):
// region i of l.Regions() starts at mem[offsets[i]]. Regions must lie inside
// mem and must not overlap.
func NewHost(l layout.Layout, rank int, mem []byte, offsets []int, opts Options) (*Cache, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	regions, err := hostRegions(l, mem, offsets)
	if err != nil {
		return nil, err
	}
	plan, err := swap.NewPlan(regions, l.SlotBytes(), 0)
	if err != nil {
		return nil, err
	}
	return newCache(l, rank, opts, func(slots int) (stage, error) {
		return &hostStage{plan: plan, buf: make([]byte, slots*l.SlotBytes())}, nil
	}, nil)
}

// hostRegions cuts mem into the layout's regions, checking bounds and
// overlap with arithmetic that cannot overflow (offsets come from a client).
func hostRegions(l layout.Layout, mem []byte, offsets []int) ([]swap.Region, error) {
	specs := l.Regions()
	if len(offsets) != len(specs) {
		return nil, fmt.Errorf("%w: %d region offsets, layout has %d regions", layout.ErrInvalid, len(offsets), len(specs))
	}
	type span struct{ lo, hi, i int }
	spans := make([]span, len(specs))
	regions := make([]swap.Region, len(specs))
	for i, r := range specs {
		size := l.RegionBytesOf(r.Kind)
		if off := offsets[i]; off < 0 || off > len(mem) || size > len(mem)-off {
			return nil, fmt.Errorf("%w: layer %d %s region [%d, +%d) outside the registered %d bytes",
				layout.ErrInvalid, r.Layer, r.Kind, off, size, len(mem))
		}
		spans[i] = span{offsets[i], offsets[i] + size, i}
		regions[i] = swap.Region{Mem: mem[offsets[i] : offsets[i]+size : offsets[i]+size], Chunk: r.Chunk, SlotOffset: r.SlotOffset}
	}
	for i := range spans {
		for j := i + 1; j < len(spans); j++ {
			if spans[i].lo < spans[j].hi && spans[j].lo < spans[i].hi {
				a, b := specs[spans[i].i], specs[spans[j].i]
				return nil, fmt.Errorf("%w: layer %d %s and layer %d %s regions overlap",
					layout.ErrInvalid, a.Layer, a.Kind, b.Layer, b.Kind)
			}
		}
	}
	return regions, nil
}

type hostStage struct {
	plan *swap.Plan
	buf  []byte
}

func (h *hostStage) Bytes() []byte                     { return h.buf }
func (h *hostStage) Gather(blocks, slots []int) error  { return h.plan.Gather(h.buf, blocks, slots) }
func (h *hostStage) Scatter(blocks, slots []int) error { return h.plan.Scatter(h.buf, blocks, slots) }
func (h *hostStage) Close() error                      { return nil }

// NewCUDA registers a cache in device memory, opened with cuda.OpenIPC;
// the Cache owns dev from now on and closes it in Close.
func NewCUDA(dev *cuda.Cache, rank int, opts Options) (*Cache, error) {
	l := dev.Layout()
	return newCache(l, rank, opts, func(slots int) (stage, error) {
		// Scratch for the whole staging: one DMA per contiguous batch.
		st, err := dev.NewStaging(slots, slots)
		if err != nil {
			return nil, err
		}
		return &cudaStage{dev: dev, st: st}, nil
	}, dev.Close)
}

type cudaStage struct {
	dev *cuda.Cache
	st  *cuda.Staging
}

func (c *cudaStage) Bytes() []byte                     { return c.st.Bytes() }
func (c *cudaStage) Gather(blocks, slots []int) error  { return c.dev.Gather(c.st, blocks, slots) }
func (c *cudaStage) Scatter(blocks, slots []int) error { return c.dev.Scatter(c.st, blocks, slots) }
func (c *cudaStage) Close() error                      { return c.st.Close() }

// Layout is the registered layout.
func (c *Cache) Layout() layout.Layout { return c.layout }

// Keys are the two store keys of the block with engine hash hash.
func (c *Cache) Keys(hash string) (key, value string) { return layout.StoredKeys(hash, c.rank) }

// acquire takes an idle staging buffer, holding the cache open meanwhile.
func (c *Cache) acquire(ctx context.Context) (stage, error) {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return nil, ErrClosed
	}
	select {
	case st := <-c.stages:
		return st, nil
	case <-ctx.Done():
		c.mu.RUnlock()
		return nil, ctx.Err()
	}
}

func (c *Cache) release(st stage) {
	c.stages <- st
	c.mu.RUnlock()
}

// Save stores cache block blocks[i] under hashes[i]'s two keys, for every i,
// a staging buffer at a time. On error, the blocks before the failing batch
// are stored and later ones may not be.
func (c *Cache) Save(ctx context.Context, store Store, blocks []int, hashes []string) error {
	if len(blocks) != len(hashes) {
		return fmt.Errorf("%w: %d block ids, %d hashes", swap.ErrBadRequest, len(blocks), len(hashes))
	}
	if _, err := swap.CheckBatch(swap.Gather, blocks, seq(len(blocks)), c.layout.Blocks, len(blocks)); err != nil {
		return err
	}
	vb := c.layout.ValueBytes()
	for start := 0; start < len(blocks); {
		st, err := c.acquire(ctx)
		if err != nil {
			return err
		}
		buf := st.Bytes()
		end := min(start+len(buf)/c.layout.SlotBytes(), len(blocks))
		err = st.Gather(blocks[start:end], seq(end-start))
		for i := start; err == nil && i < end; i++ {
			slot := buf[(i-start)*2*vb:][:2*vb]
			k, v := c.Keys(hashes[i])
			if err = store.Put(ctx, k, slot[:vb]); err == nil {
				err = store.Put(ctx, v, slot[vb:])
			}
		}
		c.release(st)
		if err != nil {
			return fmt.Errorf("kvcache: saving blocks %d..%d: %w", start, end-1, err)
		}
		start = end
	}
	return nil
}

// Load fills cache block blocks[i] from hashes[i]'s two keys, for every i,
// and returns how many leading blocks it loaded. All block ids are checked
// before anything is written. A missing block stops the load with a
// *MissingError naming its index: the blocks before it are loaded, none after.
func (c *Cache) Load(ctx context.Context, store Store, hashes []string, blocks []int) (int, error) {
	if len(blocks) != len(hashes) {
		return 0, fmt.Errorf("%w: %d hashes, %d block ids", swap.ErrBadRequest, len(hashes), len(blocks))
	}
	if err := swap.CheckDestinationBlocks(blocks, c.layout.Blocks); err != nil {
		return 0, err
	}
	for start := 0; start < len(blocks); {
		st, err := c.acquire(ctx)
		if err != nil {
			return start, err
		}
		buf := st.Bytes()
		end := min(start+len(buf)/c.layout.SlotBytes(), len(blocks))
		got, err := c.fetch(ctx, store, buf, hashes, start, end)
		if got > start {
			if serr := st.Scatter(blocks[start:got], seq(got-start)); serr != nil && err == nil {
				err, got = serr, start
			}
		}
		c.release(st)
		if err != nil {
			return got, err
		}
		start = end
	}
	return len(blocks), nil
}

// fetch reads the values of entries [start, end) into consecutive slots of
// buf and returns the end of the leading run it read in full.
func (c *Cache) fetch(ctx context.Context, store Store, buf []byte, hashes []string, start, end int) (int, error) {
	vb := c.layout.ValueBytes()
	for i := start; i < end; i++ {
		slot := buf[(i-start)*2*vb:][:2*vb]
		k, v := c.Keys(hashes[i])
		for _, kv := range []struct {
			key string
			dst []byte
		}{{k, slot[:vb]}, {v, slot[vb:]}} {
			n, err := store.Get(ctx, kv.key, kv.dst)
			switch {
			case errors.Is(err, ErrNotFound):
				return i, &MissingError{Index: i, Key: kv.key}
			case err != nil:
				return i, fmt.Errorf("kvcache: loading block %d (%s): %w", i, kv.key, err)
			case n != vb:
				return i, fmt.Errorf("%w: stored %s is %d bytes, the registered layout's value is %d",
					layout.ErrInvalid, kv.key, n, vb)
			}
		}
	}
	return end, nil
}

// Close unregisters the cache: it waits for the staging batch each Save and
// Load has in flight, makes their later batches and later calls fail with
// ErrClosed, and frees the staging (and, for a device cache, closes the IPC
// handles). Host memory stays the caller's; it may unmap it once Close
// returns.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.closeStages()
	if c.closeM != nil {
		err = errors.Join(err, c.closeM())
	}
	return err
}

func (c *Cache) closeStages() error {
	var err error
	for {
		select {
		case st := <-c.stages:
			err = errors.Join(err, st.Close())
		default:
			return err
		}
	}
}

// seq is 0, 1, …, n-1: contiguous staging slots.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
