// Package swap is the host half of kvmesh's layout-swap core: it gathers KV
// blocks out of a layer-major cache in host memory into block-major staging
// slots (for a save) and scatters staging slots back into cache blocks (for a
// load). The copying is C (kvswap.c): pthreads for large batches, streaming
// stores once a batch outgrows the caches. Every block id, slot and size is
// checked here before C runs, so a bad request is an error, never a write
// outside the regions or the staging buffer.
package swap

/*
#cgo CFLAGS: -O3 -Wall
#cgo LDFLAGS: -lpthread
#include <string.h>
#include "kvswap.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// Region is one layer-major region of the cache: Mem holds Blocks chunks of
// Chunk bytes each; block b's chunk goes to [SlotOffset, SlotOffset+Chunk) of
// a staging slot.
type Region struct {
	Mem        []byte
	Chunk      int
	SlotOffset int
}

// ErrBadRequest is wrapped by every error a Plan returns for a request that
// does not fit the cache or the staging buffer.
var ErrBadRequest = errors.New("bad swap request")

// Thresholds for spending more than the calling thread and for streaming
// stores, in bytes moved by one call. Below ParallelBytes starting threads
// costs more than it saves; above StreamBytes the destination would not stay
// in cache anyway, so bypassing it saves the read-for-ownership traffic.
const (
	ParallelBytes = 4 << 20
	StreamBytes   = 8 << 20
)

// Plan is a validated set of regions that all hold the same number of blocks
// and whose slot ranges lie inside [0, SlotBytes) without overlapping. It is
// immutable, so one Plan serves concurrent Gather and Scatter calls; making
// gathers and scatters of the same blocks not race is the caller's job.
type Plan struct {
	regions   []Region
	blocks    int
	slotBytes int
	threads   int
}

// NewPlan checks regions against slotBytes. maxThreads bounds the pthreads a
// large batch uses (including the caller); 0 means GOMAXPROCS, capped at 16.
func NewPlan(regions []Region, slotBytes, maxThreads int) (*Plan, error) {
	if len(regions) == 0 {
		return nil, fmt.Errorf("%w: no regions", ErrBadRequest)
	}
	if slotBytes <= 0 {
		return nil, fmt.Errorf("%w: slot size %d", ErrBadRequest, slotBytes)
	}
	p := &Plan{regions: append([]Region(nil), regions...), slotBytes: slotBytes, threads: maxThreads}
	if p.threads <= 0 {
		p.threads = runtime.GOMAXPROCS(0)
	}
	p.threads = min(p.threads, C.KVS_MAX_THREADS)
	for i, r := range regions {
		if r.Chunk <= 0 || len(r.Mem)%r.Chunk != 0 {
			return nil, fmt.Errorf("%w: region %d: %d bytes is not a whole number of %d-byte chunks",
				ErrBadRequest, i, len(r.Mem), r.Chunk)
		}
		blocks := len(r.Mem) / r.Chunk
		if i == 0 {
			p.blocks = blocks
		} else if blocks != p.blocks {
			return nil, fmt.Errorf("%w: region %d holds %d blocks, region 0 holds %d",
				ErrBadRequest, i, blocks, p.blocks)
		}
		if r.SlotOffset < 0 || r.SlotOffset > slotBytes-r.Chunk {
			return nil, fmt.Errorf("%w: region %d: slot range [%d, %d+%d) outside a %d-byte slot",
				ErrBadRequest, i, r.SlotOffset, r.SlotOffset, r.Chunk, slotBytes)
		}
	}
	if err := checkDisjoint(regions); err != nil {
		return nil, err
	}
	return p, nil
}

// checkDisjoint rejects regions whose slot ranges overlap: two regions would
// then gather into the same staging bytes.
func checkDisjoint(regions []Region) error {
	order := make([]int, len(regions))
	for i := range order {
		order[i] = i
	}
	sortByOffset(order, regions)
	for k := 1; k < len(order); k++ {
		a, b := regions[order[k-1]], regions[order[k]]
		if a.SlotOffset+a.Chunk > b.SlotOffset {
			return fmt.Errorf("%w: regions %d and %d overlap inside a slot", ErrBadRequest, order[k-1], order[k])
		}
	}
	return nil
}

func sortByOffset(order []int, regions []Region) {
	// Insertion sort: region lists are built in slot order, so this is linear.
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && regions[order[j]].SlotOffset < regions[order[j-1]].SlotOffset; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
}

// Blocks is the number of blocks every region holds.
func (p *Plan) Blocks() int { return p.blocks }

// SlotBytes is the size of one staging slot.
func (p *Plan) SlotBytes() int { return p.slotBytes }

// Gather copies, for every i, cache block blocks[i] of every region into
// staging slot slots[i]. Two entries may read the same block but must not
// write the same slot.
func (p *Plan) Gather(staging []byte, blocks, slots []int) error {
	return p.run(Gather, staging, blocks, slots)
}

// Scatter copies, for every i, staging slot slots[i] into cache block
// blocks[i] of every region. Two entries may read the same slot but must not
// write the same block.
func (p *Plan) Scatter(staging []byte, blocks, slots []int) error {
	return p.run(Scatter, staging, blocks, slots)
}

func (p *Plan) run(dir Direction, staging []byte, blocks, slots []int) error {
	contiguous, err := CheckBatch(dir, blocks, slots, p.blocks, len(staging)/p.slotBytes)
	if err != nil || len(blocks) == 0 {
		return err
	}
	moved := uint64(len(blocks)) * uint64(p.slotBytes)

	// The regions and staging may be Go memory (tests, small clients) or an
	// mmap'd memfd; pinning makes passing pointers to them inside cregions
	// legal under the cgo rules and is a no-op for non-Go memory.
	var pin runtime.Pinner
	defer pin.Unpin()
	cregions := make([]C.kvs_region, len(p.regions))
	for i, r := range p.regions {
		base := unsafe.Pointer(unsafe.SliceData(r.Mem))
		pin.Pin(base)
		cregions[i] = C.kvs_region{base: (*C.uint8_t)(base), chunk: C.uint64_t(r.Chunk), slot_off: C.uint64_t(r.SlotOffset)}
	}
	stage := unsafe.Pointer(unsafe.SliceData(staging))
	pin.Pin(stage)
	cblocks, cslots := toInt64(blocks), toInt64(slots)
	// b itself is Go memory holding these pointers, so they are pinned too.
	pin.Pin(unsafe.SliceData(cregions))
	pin.Pin(unsafe.SliceData(cblocks))
	pin.Pin(unsafe.SliceData(cslots))

	b := C.kvs_batch{
		regions:    unsafe.SliceData(cregions),
		nregions:   C.int64_t(len(cregions)),
		staging:    (*C.uint8_t)(stage),
		slot_bytes: C.uint64_t(p.slotBytes),
		blocks:     (*C.int64_t)(unsafe.Pointer(unsafe.SliceData(cblocks))),
		slots:      (*C.int64_t)(unsafe.Pointer(unsafe.SliceData(cslots))),
		n:          C.int64_t(len(blocks)),
		threads:    1,
	}
	if moved >= ParallelBytes {
		b.threads = C.int32_t(p.threads)
	}
	if moved >= StreamBytes {
		b.nontemporal = 1
	}
	if contiguous {
		b.slots_contiguous = 1
	}
	cdir := C.int(C.KVS_GATHER)
	if dir == Scatter {
		cdir = C.KVS_SCATTER
	}
	C.kvs_run(&b, cdir)
	runtime.KeepAlive(p)
	runtime.KeepAlive(staging)
	return nil
}

// Direction says which side of a batch is written.
type Direction int

const (
	// Gather writes staging slots from cache blocks (a save).
	Gather Direction = iota
	// Scatter writes cache blocks from staging slots (a load).
	Scatter
)

// CheckBatch validates a batch pairing blocks[i] (of a cache of numBlocks
// blocks) with slots[i] (of a staging buffer of numSlots slots): equal
// lengths, every index in range, and no destination written twice, since a
// repeated destination would make the result depend on thread timing. It
// reports whether the slots are contiguous (slots[i] == slots[0]+i), the case
// the copy engines serve as one span. The CUDA path uses it too.
func CheckBatch(dir Direction, blocks, slots []int, numBlocks, numSlots int) (contiguous bool, err error) {
	if len(blocks) != len(slots) {
		return false, fmt.Errorf("%w: %d block ids but %d slots", ErrBadRequest, len(blocks), len(slots))
	}
	contiguous = true
	for i := range blocks {
		if b := blocks[i]; b < 0 || b >= numBlocks {
			return false, fmt.Errorf("%w: entry %d: block id %d outside the cache (0..%d)", ErrBadRequest, i, b, numBlocks-1)
		}
		if s := slots[i]; s < 0 || s >= numSlots {
			return false, fmt.Errorf("%w: entry %d: slot %d outside the staging buffer (%d slots)", ErrBadRequest, i, s, numSlots)
		}
		contiguous = contiguous && slots[i] == slots[0]+i
	}
	if dir == Gather && contiguous {
		return true, nil // distinct by construction
	}
	written, limit, what := slots, numSlots, "slot"
	if dir == Scatter {
		written, limit, what = blocks, numBlocks, "block id"
	}
	return contiguous, checkDistinct(written, limit, what)
}

// CheckDestinationBlocks validates the block ids a load will write, before
// any of it runs: each inside a cache of numBlocks blocks, none repeated.
func CheckDestinationBlocks(blocks []int, numBlocks int) error {
	for i, b := range blocks {
		if b < 0 || b >= numBlocks {
			return fmt.Errorf("%w: entry %d: block id %d outside the cache (0..%d)", ErrBadRequest, i, b, numBlocks-1)
		}
	}
	return checkDistinct(blocks, numBlocks, "block id")
}

func checkDistinct(written []int, limit int, what string) error {
	if i, j, dup := firstDuplicate(written, limit); dup {
		return fmt.Errorf("%w: entries %d and %d write the same destination %s %d",
			ErrBadRequest, i, j, what, written[j])
	}
	return nil
}

// firstDuplicate finds the first repeated value in vs (all in [0, limit)),
// with a bitmap when that is small and a map otherwise.
func firstDuplicate(vs []int, limit int) (first, second int, dup bool) {
	if limit <= 64*len(vs)+4096 {
		seen := make([]uint64, (limit+63)/64)
		for j, v := range vs {
			if seen[v/64]&(1<<(v%64)) != 0 {
				for i := range j {
					if vs[i] == v {
						return i, j, true
					}
				}
			}
			seen[v/64] |= 1 << (v % 64)
		}
		return 0, 0, false
	}
	where := make(map[int]int, len(vs))
	for j, v := range vs {
		if i, ok := where[v]; ok {
			return i, j, true
		}
		where[v] = j
	}
	return 0, 0, false
}

func toInt64(vs []int) []int64 {
	out := make([]int64, len(vs))
	for i, v := range vs {
		out[i] = int64(v)
	}
	return out
}

// Memcpy copies src into dst (which must be at least as long) with the C
// library's memcpy: the yardstick the swap benchmark compares against.
func Memcpy(dst, src []byte) {
	if len(src) == 0 {
		return
	}
	if len(dst) < len(src) {
		panic("swap.Memcpy: dst shorter than src")
	}
	C.memcpy(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)))
}
