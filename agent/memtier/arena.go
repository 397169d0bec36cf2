// Package memtier is the memory tier's storage: one mmap'd arena of fixed
// size, carved into pages and handed out as lists of extents.
//
// The arena lives outside the Go heap, so stored blocks cost the garbage
// collector nothing however many there are. A block need not be contiguous:
// any free pages will do, so the arena never fails an allocation for
// fragmentation, and a next-fit scan keeps most blocks in one extent so that
// reads are one memmove. Arena is not safe for concurrent use; the store
// serialises Alloc and Free, while copies into and out of allocations the
// caller owns may run concurrently.
package memtier

import (
	"fmt"
	"math/bits"

	"golang.org/x/sys/unix"
)

// DefaultPageSize is the allocation unit: small enough that a small value
// wastes little, large enough that the page bitmap stays tiny.
const DefaultPageSize = 4096

// Extent is a run of pages: bytes [Off, Off+Len) of the arena.
type Extent struct {
	Off, Len uint64
}

// Alloc is one block's storage: extents whose lengths add up to the size
// asked for.
type Alloc []Extent

// Size is the number of bytes the allocation holds.
func (a Alloc) Size() uint64 {
	var n uint64
	for _, e := range a {
		n += e.Len
	}
	return n
}

// Arena is a fixed-size page allocator over anonymous memory.
type Arena struct {
	mem       []byte
	pageSize  uint64
	pages     uint64
	free      []uint64 // bit set = page free
	freePages uint64
	cursor    uint64 // next-fit: where the last allocation ended
}

// New maps an arena of capacity bytes (rounded down to whole pages).
func New(capacity uint64, pageSize uint64) (*Arena, error) {
	if pageSize == 0 || pageSize&(pageSize-1) != 0 {
		return nil, fmt.Errorf("page size %d: must be a power of two", pageSize)
	}
	pages := capacity / pageSize
	if pages == 0 {
		return nil, fmt.Errorf("memory capacity %d: below one %d-byte page", capacity, pageSize)
	}
	mem, err := unix.Mmap(-1, 0, int(pages*pageSize), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes of memory: %w", pages*pageSize, err)
	}
	a := &Arena{mem: mem, pageSize: pageSize, pages: pages, freePages: pages,
		free: make([]uint64, (pages+63)/64)}
	for p := uint64(0); p < pages; p++ {
		a.free[p/64] |= 1 << (p % 64)
	}
	return a, nil
}

// Close unmaps the arena; no allocation may be used afterwards.
func (a *Arena) Close() error {
	if a.mem == nil {
		return nil
	}
	err := unix.Munmap(a.mem)
	a.mem = nil
	return err
}

// Capacity is the arena's size in bytes.
func (a *Arena) Capacity() uint64 { return a.pages * a.pageSize }

// Free bytes, in whole pages.
func (a *Arena) FreeBytes() uint64 { return a.freePages * a.pageSize }

// Footprint is what an allocation of size bytes takes from the arena.
func (a *Arena) Footprint(size uint64) uint64 {
	return max(1, (size+a.pageSize-1)/a.pageSize) * a.pageSize
}

// Alloc takes pages for size bytes. It returns false, and takes nothing,
// when fewer pages are free.
func (a *Arena) Alloc(size uint64) (Alloc, bool) {
	need := a.Footprint(size) / a.pageSize
	if need > a.freePages {
		return nil, false
	}
	var out Alloc
	remaining := size
	p := a.cursor
	for need > 0 {
		p = a.nextFree(p)
		run := uint64(0)
		for run < need && p+run < a.pages && a.isFree(p+run) {
			a.free[(p+run)/64] &^= 1 << ((p + run) % 64)
			run++
		}
		length := min(run*a.pageSize, remaining)
		if remaining == 0 { // a zero-byte block still holds one page
			length = 0
		}
		out = append(out, Extent{Off: p * a.pageSize, Len: length})
		remaining -= length
		a.freePages -= run
		need -= run
		p += run
	}
	a.cursor = p % a.pages
	return out, true
}

// Release returns an allocation's pages.
func (a *Arena) Release(al Alloc) {
	for _, e := range al {
		first := e.Off / a.pageSize
		n := max(1, (e.Len+a.pageSize-1)/a.pageSize)
		for p := first; p < first+n; p++ {
			a.free[p/64] |= 1 << (p % 64)
		}
		a.freePages += n
	}
}

func (a *Arena) isFree(p uint64) bool { return a.free[p/64]&(1<<(p%64)) != 0 }

// nextFree finds the first free page at or after p, wrapping around. The
// caller guarantees one exists.
func (a *Arena) nextFree(p uint64) uint64 {
	if p >= a.pages {
		p = 0
	}
	words := uint64(len(a.free))
	w := p / 64
	word := a.free[w] &^ (1<<(p%64) - 1)
	for i := uint64(0); i <= words; i++ {
		if word != 0 {
			q := w*64 + uint64(bits.TrailingZeros64(word))
			if q < a.pages {
				return q
			}
		}
		w = (w + 1) % words
		word = a.free[w]
	}
	panic("memtier: no free page although freePages > 0")
}

// WriteVec copies the concatenation of src into the allocation, which must
// be exactly that many bytes.
func (a *Arena) WriteVec(al Alloc, src [][]byte) {
	copyVec(a.Slices(al), src)
}

// ReadVec copies the allocation into dst, a vector of buffers filled in
// order whose lengths add up to the allocation's size.
func (a *Arena) ReadVec(al Alloc, dst [][]byte) {
	copyVec(dst, a.Slices(al))
}

// copyVec copies the concatenation of src over the concatenation of dst,
// as many bytes as the shorter holds, in as few copies as the boundaries
// allow.
func copyVec(dst, src [][]byte) {
	var d, s []byte
	for {
		for len(d) == 0 && len(dst) > 0 {
			d, dst = dst[0], dst[1:]
		}
		for len(s) == 0 && len(src) > 0 {
			s, src = src[0], src[1:]
		}
		if len(d) == 0 || len(s) == 0 {
			return
		}
		n := copy(d, s)
		d, s = d[n:], s[n:]
	}
}

// Slices returns the allocation's bytes in place, for writers such as the
// disk tier that take a vector of buffers. The slices are valid until the
// allocation is released.
func (a *Arena) Slices(al Alloc) [][]byte {
	out := make([][]byte, len(al))
	for i, e := range al {
		out[i] = a.mem[e.Off : e.Off+e.Len : e.Off+e.Len]
	}
	return out
}
