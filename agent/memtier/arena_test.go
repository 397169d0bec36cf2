package memtier

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestAllocAccounting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		sizes []uint64
		pages uint64 // pages taken in all
	}{
		{"zero-byte block takes a page", []uint64{0}, 1},
		{"exact pages", []uint64{4096, 8192}, 3},
		{"partial pages round up", []uint64{1, 4097}, 3},
		{"fills the arena", []uint64{16 * 4096}, 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := New(16*4096, 4096)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			var allocs []Alloc
			for _, s := range tc.sizes {
				al, ok := a.Alloc(s)
				if !ok {
					t.Fatalf("Alloc(%d) failed", s)
				}
				if al.Size() != s {
					t.Fatalf("Alloc(%d) holds %d bytes", s, al.Size())
				}
				allocs = append(allocs, al)
			}
			if used := a.Capacity() - a.FreeBytes(); used != tc.pages*4096 {
				t.Fatalf("used %d bytes, want %d", used, tc.pages*4096)
			}
			for _, al := range allocs {
				a.Release(al)
			}
			if a.FreeBytes() != a.Capacity() {
				t.Fatalf("after release %d of %d free", a.FreeBytes(), a.Capacity())
			}
		})
	}
}

func TestAllocRefusesWhenFull(t *testing.T) {
	t.Parallel()
	a, _ := New(4*4096, 4096)
	defer a.Close()
	if _, ok := a.Alloc(5 * 4096); ok {
		t.Fatal("allocated more than the arena")
	}
	al, _ := a.Alloc(3 * 4096)
	if _, ok := a.Alloc(2 * 4096); ok {
		t.Fatal("allocated past the free pages")
	}
	if a.FreeBytes() != 4096 {
		t.Fatalf("a refused Alloc took pages: %d free", a.FreeBytes())
	}
	a.Release(al)
}

// Fragmented free space still serves any allocation that fits in the free
// page count, scattered over extents, and the bytes round-trip.
func TestFragmentedAllocRoundTrips(t *testing.T) {
	t.Parallel()
	const pages = 64
	a, _ := New(pages*4096, 4096)
	defer a.Close()
	var singles []Alloc
	for i := 0; i < pages; i++ {
		al, _ := a.Alloc(4096)
		singles = append(singles, al)
	}
	for i := 0; i < pages; i += 2 { // free every other page
		a.Release(singles[i])
	}
	size := uint64(pages/2*4096 - 100)
	al, ok := a.Alloc(size)
	if !ok {
		t.Fatal("fragmented arena refused an allocation that fits")
	}
	if len(al) < 2 {
		t.Fatalf("expected a scattered allocation, got %d extents", len(al))
	}
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(rand.IntN(256))
	}
	a.WriteVec(al, [][]byte{src[:1000], src[1000:1001], {}, src[1001:]})
	dst := make([]byte, size)
	a.ReadVec(al, [][]byte{dst[:7], dst[7:5000], dst[5000:]})
	if !bytes.Equal(src, dst) {
		t.Fatal("bytes differ after a scattered round trip")
	}
}

func TestNewRejectsBadSizes(t *testing.T) {
	t.Parallel()
	if _, err := New(100, 4096); err == nil {
		t.Error("capacity below a page accepted")
	}
	if _, err := New(1<<20, 3000); err == nil {
		t.Error("page size not a power of two accepted")
	}
}

func BenchmarkReadVec4MiB(b *testing.B) {
	a, _ := New(64<<20, DefaultPageSize)
	defer a.Close()
	al, _ := a.Alloc(4 << 20)
	src := make([]byte, 4<<20)
	a.WriteVec(al, [][]byte{src})
	dst := make([]byte, 4<<20)
	b.SetBytes(4 << 20)
	for b.Loop() {
		a.ReadVec(al, [][]byte{dst})
	}
}
