//go:build cuda

package cuda

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/kvmesh/kvmesh/gpu/layout"
	"github.com/kvmesh/kvmesh/gpu/swap"
)

func needDevice(t *testing.T) {
	t.Helper()
	if err := deviceReady(0); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
}

// hostMirror is the same cache in host memory, driven by the host swap core:
// the reference the device path must match byte for byte.
func hostMirror(t *testing.T, l layout.Layout) *swap.Plan {
	t.Helper()
	var regions []swap.Region
	for _, r := range l.Regions() {
		regions = append(regions, swap.Region{Mem: make([]byte, l.RegionBytesOf(r.Kind)), Chunk: r.Chunk, SlotOffset: r.SlotOffset})
	}
	p, err := swap.NewPlan(regions, l.SlotBytes(), 1)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDeviceMatchesHost(t *testing.T) {
	needDevice(t)
	tests := []struct {
		name       string
		layout     layout.Layout
		scratch    int
		contiguous bool
	}{
		{"fp16 contiguous one piece", layout.Layout{Layers: 4, Blocks: 12, Heads: 2, BlockTokens: 16, HeadDim: 64, ElemBytes: 2}, 8, true},
		{"fp16 shuffled slots in pieces", layout.Layout{Layers: 4, Blocks: 12, Heads: 2, BlockTokens: 16, HeadDim: 64, ElemBytes: 2}, 3, false},
		{"fp8 odd sizes and scales", layout.Layout{Layers: 3, Blocks: 10, Heads: 3, BlockTokens: 5, HeadDim: 7, ElemBytes: 1, ScaleBytes: 5}, 4, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, n := tc.layout, 8
			rng := rand.New(rand.NewPCG(5, uint64(tc.scratch)))
			dev, err := NewDeviceCache(0, l)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			st, err := dev.NewStaging(n, tc.scratch)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			host := hostMirror(t, l)
			hostStage := make([]byte, n*l.SlotBytes())

			// Load every block of both caches from the same random slots...
			all := rng.Perm(l.Blocks)
			for start := 0; start < len(all); start += n {
				ids := all[start:min(start+n, len(all))]
				slots := rng.Perm(n)[:len(ids)]
				for i := range st.Bytes() {
					st.Bytes()[i] = byte(rng.Uint32())
				}
				copy(hostStage, st.Bytes())
				if err := dev.Scatter(st, ids, slots); err != nil {
					t.Fatal(err)
				}
				if err := host.Scatter(hostStage, ids, slots); err != nil {
					t.Fatal(err)
				}
			}
			// ...then save shuffled blocks from both and compare.
			ids := rng.Perm(l.Blocks)[:n]
			slots := rng.Perm(n)
			if tc.contiguous {
				for i := range slots {
					slots[i] = i
				}
			}
			if err := dev.Gather(st, ids, slots); err != nil {
				t.Fatal(err)
			}
			if err := host.Gather(hostStage, ids, slots); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(st.Bytes(), hostStage) {
				t.Fatal("device gather differs from the host reference")
			}
		})
	}
}

func TestDeviceBadRequests(t *testing.T) {
	needDevice(t)
	l := layout.Layout{Layers: 2, Blocks: 4, Heads: 1, BlockTokens: 2, HeadDim: 8, ElemBytes: 2}
	dev, err := NewDeviceCache(0, l)
	if err != nil {
		t.Fatal(err)
	}
	st, err := dev.NewStaging(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := dev.Gather(st, []int{4}, []int{0}); !errors.Is(err, swap.ErrBadRequest) {
		t.Errorf("block past the cache: %v", err)
	}
	if err := dev.Scatter(st, []int{1, 1}, []int{0, 1}); !errors.Is(err, swap.ErrBadRequest) {
		t.Errorf("duplicate destination block: %v", err)
	}
	if err := dev.Gather(st, []int{0}, []int{2}); !errors.Is(err, swap.ErrBadRequest) {
		t.Errorf("slot past the staging: %v", err)
	}
	other, err := NewDeviceCache(0, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Gather(st, []int{0}, []int{0}); err == nil {
		t.Error("staging of another cache accepted")
	}
	other.Close()
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dev.Gather(st, []int{0}, []int{0}); !errors.Is(err, ErrClosed) {
		t.Errorf("gather on a closed cache: %v", err)
	}
}

func TestOpenIPCRefusesGarbage(t *testing.T) {
	needDevice(t)
	l := layout.Layout{Layers: 1, Blocks: 2, Heads: 1, BlockTokens: 1, HeadDim: 8, ElemBytes: 2}
	regions := make([]IPCRegion, len(l.Regions()))
	for i := range regions {
		for k := range regions[i].Handle {
			regions[i].Handle[k] = byte(i*64 + k)
		}
	}
	if _, err := OpenIPC(0, l, regions); err == nil {
		t.Fatal("garbage IPC handles opened")
	}
	if _, err := OpenIPC(0, l, regions[:1]); !errors.Is(err, layout.ErrInvalid) {
		t.Fatalf("too few regions: %v", err)
	}
}
