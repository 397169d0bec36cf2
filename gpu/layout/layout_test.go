package layout

import (
	"errors"
	"math"
	"testing"
)

var realistic = Layout{Layers: 32, Blocks: 1000, Heads: 8, BlockTokens: 64, HeadDim: 128, ElemBytes: 2}

func TestSizes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                        string
		l                           Layout
		chunk, region, scale, value int
		regions                     int
	}{
		{"realistic fp16", realistic, 131072, 131072000, 0, 32 * 131072, 64},
		{"fp8 with scales", Layout{Layers: 2, Blocks: 3, Heads: 2, BlockTokens: 4, HeadDim: 5, ElemBytes: 1, ScaleBytes: 16}, 40, 120, 48, 2 * (40 + 16), 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := tc.l
			if err := l.Validate(); err != nil {
				t.Fatal(err)
			}
			if l.ChunkBytes() != tc.chunk || l.RegionBytes() != tc.region || l.ScaleRegionBytes() != tc.scale ||
				l.ValueBytes() != tc.value || l.SlotBytes() != 2*tc.value || len(l.Regions()) != tc.regions {
				t.Fatalf("sizes %d %d %d %d %d regions %d", l.ChunkBytes(), l.RegionBytes(), l.ScaleRegionBytes(),
					l.ValueBytes(), l.SlotBytes(), len(l.Regions()))
			}
			// The regions' slot ranges tile the slot exactly.
			covered := make([]int, l.SlotBytes())
			for _, r := range l.Regions() {
				for i := r.SlotOffset; i < r.SlotOffset+r.Chunk; i++ {
					covered[i]++
				}
			}
			for i, c := range covered {
				if c != 1 {
					t.Fatalf("slot byte %d covered %d times", i, c)
				}
			}
		})
	}
}

func TestStoredFormIsBlockMajorKThenV(t *testing.T) {
	t.Parallel()
	l := Layout{Layers: 2, Blocks: 3, Heads: 1, BlockTokens: 1, HeadDim: 4, ElemBytes: 1, ScaleBytes: 2}
	want := map[Region]bool{
		{K, 0, 4, 0}: true, {K, 1, 4, 4}: true, {KScale, 0, 2, 8}: true, {KScale, 1, 2, 10}: true,
		{V, 0, 4, 12}: true, {V, 1, 4, 16}: true, {VScale, 0, 2, 20}: true, {VScale, 1, 2, 22}: true,
	}
	for _, r := range l.Regions() {
		if !want[r] {
			t.Errorf("unexpected region %+v", r)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	t.Parallel()
	huge := math.MaxInt / 4
	tests := []struct {
		name string
		l    Layout
	}{
		{"zero layers", Layout{Blocks: 1, Heads: 1, BlockTokens: 1, HeadDim: 1, ElemBytes: 2}},
		{"negative blocks", Layout{Layers: 1, Blocks: -1, Heads: 1, BlockTokens: 1, HeadDim: 1, ElemBytes: 2}},
		{"elem 4", Layout{Layers: 1, Blocks: 1, Heads: 1, BlockTokens: 1, HeadDim: 1, ElemBytes: 4}},
		{"negative scale", Layout{Layers: 1, Blocks: 1, Heads: 1, BlockTokens: 1, HeadDim: 1, ElemBytes: 1, ScaleBytes: -1}},
		{"chunk overflows", Layout{Layers: 1, Blocks: 1, Heads: huge, BlockTokens: 8, HeadDim: 1, ElemBytes: 2}},
		{"region overflows", Layout{Layers: 1, Blocks: huge, Heads: 1, BlockTokens: 8, HeadDim: 1, ElemBytes: 1}},
		{"scale region overflows", Layout{Layers: 1, Blocks: huge, Heads: 1, BlockTokens: 1, HeadDim: 1, ElemBytes: 1, ScaleBytes: 8}},
		{"chunk plus scale overflows", Layout{Layers: 1, Blocks: 1, Heads: 1, BlockTokens: 1, HeadDim: math.MaxInt / 2, ElemBytes: 2, ScaleBytes: math.MaxInt}},
		{"total overflows", Layout{Layers: huge, Blocks: 8, Heads: 1, BlockTokens: 1, HeadDim: 1, ElemBytes: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.l.Validate(); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate() = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestStoredKeys(t *testing.T) {
	t.Parallel()
	if k, v := StoredKeys("9f3a", 3); k != "9f3a_key_3" || v != "9f3a_value_3" {
		t.Fatalf("StoredKeys = %q, %q", k, v)
	}
}
