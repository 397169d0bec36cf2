// Package layout describes an inference engine's paged KV cache and the form
// in which kvmesh stores its blocks.
//
// The engine's cache is layer-major: for every layer there is a K region and
// a V region, each of shape [Blocks, Heads, BlockTokens, HeadDim] with
// ElemBytes bytes per element, and optionally a K and a V scale plane of
// ScaleBytes bytes per block (block-wise fp8 quantisation). Because the block
// index is the outermost dimension, one block of one layer is one contiguous
// chunk of ChunkBytes() bytes inside its region.
//
// A stored block is block-major: for one block, [Layers, Heads, BlockTokens,
// HeadDim], K and V under two keys. When scale planes exist, each key's value
// is the data of every layer followed by the scale plane of every layer
// ([Layers, ScaleBytes]). A staging slot holds the K value then the V value,
// so one gather fills both keys of a block.
package layout

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Layout is the shape of one rank's layer-major KV cache. A Layout that
// passed Validate has every derived size representable as a positive int.
type Layout struct {
	Layers      int // transformer layers held by this rank
	Blocks      int // pages per layer region (num_blocks)
	Heads       int // KV heads held by this rank
	BlockTokens int // tokens per page
	HeadDim     int // elements per head and token
	ElemBytes   int // 1 (fp8, int8) or 2 (fp16, bf16)
	ScaleBytes  int // bytes of one block's scale plane in each layer's K (and V) scale region; 0: none
}

// ErrInvalid is wrapped by every error that reports a layout, or memory
// registered for one, that cannot be used.
var ErrInvalid = errors.New("invalid KV cache layout")

// Validate checks that every dimension is positive, that the element size is
// one the engines use, and that no derived size overflows an int (a layout
// comes from a client, so products are checked, not trusted).
func (l Layout) Validate() error {
	dims := []struct {
		name string
		v    int
	}{
		{"layers", l.Layers}, {"blocks", l.Blocks}, {"heads", l.Heads},
		{"block_tokens", l.BlockTokens}, {"head_dim", l.HeadDim},
	}
	for _, d := range dims {
		if d.v <= 0 {
			return fmt.Errorf("%w: %s = %d, must be > 0", ErrInvalid, d.name, d.v)
		}
	}
	if l.ElemBytes != 1 && l.ElemBytes != 2 {
		return fmt.Errorf("%w: elem_bytes = %d, must be 1 or 2", ErrInvalid, l.ElemBytes)
	}
	if l.ScaleBytes < 0 {
		return fmt.Errorf("%w: scale_bytes = %d, must be >= 0", ErrInvalid, l.ScaleBytes)
	}
	chunk, ok := mulAll(l.Heads, l.BlockTokens, l.HeadDim, l.ElemBytes)
	if !ok {
		return fmt.Errorf("%w: heads*block_tokens*head_dim*elem_bytes overflows", ErrInvalid)
	}
	if _, ok := mulAll(l.Blocks, chunk); !ok {
		return fmt.Errorf("%w: a layer region (blocks*%d bytes) overflows", ErrInvalid, chunk)
	}
	if _, ok := mulAll(l.Blocks, l.ScaleBytes); !ok {
		return fmt.Errorf("%w: a scale region (blocks*scale_bytes) overflows", ErrInvalid)
	}
	perLayer, ok := addAll(chunk, l.ScaleBytes)
	if !ok {
		return fmt.Errorf("%w: chunk plus scale plane overflows", ErrInvalid)
	}
	// The slot (K and V of one block) and the whole cache must fit too.
	if _, ok := mulAll(2, l.Layers, perLayer, l.Blocks); !ok {
		return fmt.Errorf("%w: total cache size overflows", ErrInvalid)
	}
	return nil
}

// ChunkBytes is the size of one block of one layer in a K or V region:
// Heads*BlockTokens*HeadDim*ElemBytes.
func (l Layout) ChunkBytes() int { return l.Heads * l.BlockTokens * l.HeadDim * l.ElemBytes }

// RegionBytes is the size of one layer's K (or V) region.
func (l Layout) RegionBytes() int { return l.Blocks * l.ChunkBytes() }

// ScaleRegionBytes is the size of one layer's K (or V) scale region; 0 when
// the layout has no scale planes.
func (l Layout) ScaleRegionBytes() int { return l.Blocks * l.ScaleBytes }

// ValueBytes is the size of one stored value (the K or the V key of one
// block): every layer's chunk, then every layer's scale plane.
func (l Layout) ValueBytes() int { return l.Layers * (l.ChunkBytes() + l.ScaleBytes) }

// SlotBytes is the size of one staging slot: the K value then the V value.
func (l Layout) SlotBytes() int { return 2 * l.ValueBytes() }

// Kind tells which tensor a region belongs to.
type Kind int

// The four kinds of region a layer can have.
const (
	K Kind = iota
	V
	KScale
	VScale
)

func (k Kind) String() string {
	switch k {
	case K:
		return "K"
	case V:
		return "V"
	case KScale:
		return "K scale"
	case VScale:
		return "V scale"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Region is one layer-major region of the cache as the swap core sees it:
// block b occupies bytes [b*Chunk, (b+1)*Chunk) of it and lands at
// [SlotOffset, SlotOffset+Chunk) of a staging slot.
type Region struct {
	Kind       Kind
	Layer      int
	Chunk      int
	SlotOffset int
}

// Regions lists every region of the cache in the order the engine registers
// them: per kind (K, V, K scale, V scale), layers ascending. Their slot
// ranges tile [0, SlotBytes()) exactly.
func (l Layout) Regions() []Region {
	chunk, value := l.ChunkBytes(), l.ValueBytes()
	scaleStart := l.Layers * chunk // inside a value, scale planes follow the data
	kinds := []Kind{K, V}
	if l.ScaleBytes > 0 {
		kinds = append(kinds, KScale, VScale)
	}
	out := make([]Region, 0, len(kinds)*l.Layers)
	for _, kind := range kinds {
		for layer := 0; layer < l.Layers; layer++ {
			r := Region{Kind: kind, Layer: layer}
			switch kind {
			case K:
				r.Chunk, r.SlotOffset = chunk, layer*chunk
			case V:
				r.Chunk, r.SlotOffset = chunk, value+layer*chunk
			case KScale:
				r.Chunk, r.SlotOffset = l.ScaleBytes, scaleStart+layer*l.ScaleBytes
			case VScale:
				r.Chunk, r.SlotOffset = l.ScaleBytes, value+scaleStart+layer*l.ScaleBytes
			}
			out = append(out, r)
		}
	}
	return out
}

// RegionBytesOf is the size the engine's allocation for a region of kind k
// must have.
func (l Layout) RegionBytesOf(k Kind) int {
	if k == KScale || k == VScale {
		return l.ScaleRegionBytes()
	}
	return l.RegionBytes()
}

// StoredKeys returns the two keys under which the block with engine hash
// hash is stored for tensor-parallel rank rank, FastDeploy's naming:
// "{hash}_key_{rank}" and "{hash}_value_{rank}".
func StoredKeys(hash string, rank int) (key, value string) {
	return fmt.Sprintf("%s_key_%d", hash, rank), fmt.Sprintf("%s_value_%d", hash, rank)
}

func mulAll(vs ...int) (int, bool) {
	p := uint64(1)
	for _, v := range vs {
		if v < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(p, uint64(v))
		if hi != 0 || lo > math.MaxInt {
			return 0, false
		}
		p = lo
	}
	return int(p), true
}

func addAll(vs ...int) (int, bool) {
	s := uint64(0)
	for _, v := range vs {
		if v < 0 {
			return 0, false
		}
		sum, carry := bits.Add64(s, uint64(v), 0)
		if carry != 0 || sum > math.MaxInt {
			return 0, false
		}
		s = sum
	}
	return int(s), true
}
