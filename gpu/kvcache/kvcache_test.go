package kvcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/gpu/layout"
	"github.com/kvmesh/kvmesh/gpu/swap"
)

// mapStore is an in-memory Store; putHook, when set, runs inside Put.
type mapStore struct {
	mu      sync.Mutex
	m       map[string][]byte
	putHook func()
}

func newMapStore() *mapStore { return &mapStore{m: map[string][]byte{}} }

func (s *mapStore) Put(_ context.Context, key string, value []byte) error {
	if s.putHook != nil {
		s.putHook()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = bytes.Clone(value)
	return nil
}

func (s *mapStore) Get(_ context.Context, key string, dst []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return 0, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	return copy(dst, v), nil
}

// hostCache lays the regions of l out back to back in one buffer (as a memfd
// would hold them), with a gap before each to prove offsets are honoured.
func hostCache(t *testing.T, l layout.Layout, rank int, opts Options) (*Cache, []byte, []int) {
	t.Helper()
	var offsets []int
	size := 0
	for _, r := range l.Regions() {
		size += 64
		offsets = append(offsets, size)
		size += l.RegionBytesOf(r.Kind)
	}
	mem := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(size), 1))
	for i := range mem {
		mem[i] = byte(rng.Uint32())
	}
	c, err := NewHost(l, rank, mem, offsets, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, mem, offsets
}

// blockBytes is block b of every region of a host cache, region order.
func blockBytes(l layout.Layout, mem []byte, offsets []int, b int) []byte {
	var out []byte
	for i, r := range l.Regions() {
		out = append(out, mem[offsets[i]+b*r.Chunk:][:r.Chunk]...)
	}
	return out
}

var testLayout = layout.Layout{Layers: 3, Blocks: 10, Heads: 2, BlockTokens: 4, HeadDim: 6, ElemBytes: 2, ScaleBytes: 3}

func TestSaveThenLoadIntoOtherBlocks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
	}{
		{"one staging slot", Options{StagingSlots: 1, Stagings: 1}},
		{"batches of three", Options{StagingSlots: 3}},
		{"defaults", Options{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := testLayout
			prefill, pmem, poff := hostCache(t, l, 1, tc.opts)
			decode, dmem, doff := hostCache(t, l, 1, tc.opts)
			store := newMapStore()
			src, dst := []int{7, 2, 9, 0, 5}, []int{1, 8, 3, 6, 4}
			hashes := []string{"a", "b", "c", "d", "e"}
			if err := prefill.Save(context.Background(), store, src, hashes); err != nil {
				t.Fatal(err)
			}
			if len(store.m) != 2*len(src) {
				t.Fatalf("%d keys stored, want %d", len(store.m), 2*len(src))
			}
			k, v := store.m["c_key_1"], store.m["c_value_1"]
			if len(k) != l.ValueBytes() || len(v) != l.ValueBytes() {
				t.Fatalf("stored value sizes %d/%d, want %d", len(k), len(v), l.ValueBytes())
			}
			n, err := decode.Load(context.Background(), store, hashes, dst)
			if err != nil || n != len(dst) {
				t.Fatalf("Load = %d, %v", n, err)
			}
			for i := range src {
				if !bytes.Equal(blockBytes(l, dmem, doff, dst[i]), blockBytes(l, pmem, poff, src[i])) {
					t.Fatalf("decode block %d != prefill block %d", dst[i], src[i])
				}
			}
		})
	}
}

func TestLoadStopsAtFirstMissingBlock(t *testing.T) {
	t.Parallel()
	l := testLayout
	prefill, _, _ := hostCache(t, l, 0, Options{StagingSlots: 2})
	decode, dmem, doff := hostCache(t, l, 0, Options{StagingSlots: 2})
	store := newMapStore()
	hashes := []string{"h0", "h1", "h2", "h3", "h4"}
	if err := prefill.Save(context.Background(), store, []int{0, 1, 2, 3, 4}, hashes); err != nil {
		t.Fatal(err)
	}
	delete(store.m, "h3_value_0")
	dst := []int{5, 6, 7, 8, 9}
	before := bytes.Clone(dmem)
	n, err := decode.Load(context.Background(), store, hashes, dst)
	var miss *MissingError
	if !errors.As(err, &miss) || miss.Index != 3 || miss.Key != "h3_value_0" || !errors.Is(err, ErrNotFound) || n != 3 {
		t.Fatalf("Load = %d, %v; want 3 and block 3 missing", n, err)
	}
	for i, b := range dst {
		changed := !bytes.Equal(blockBytes(l, dmem, doff, b), blockBytes(l, before, doff, b))
		if changed != (i < 3) {
			t.Errorf("block %d (entry %d) changed = %t", b, i, changed)
		}
	}
}

func TestBadRequestsWriteNothing(t *testing.T) {
	t.Parallel()
	l := testLayout
	c, mem, _ := hostCache(t, l, 0, Options{})
	store := newMapStore()
	if err := c.Save(context.Background(), store, []int{0, 1}, []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		hashes []string
		blocks []int
		want   error
	}{
		{"block id outside the cache", []string{"x"}, []int{10}, swap.ErrBadRequest},
		{"negative block id", []string{"x"}, []int{-1}, swap.ErrBadRequest},
		{"duplicate destination", []string{"x", "y"}, []int{4, 4}, swap.ErrBadRequest},
		{"lengths differ", []string{"x", "y"}, []int{4}, swap.ErrBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := bytes.Clone(mem)
			n, err := c.Load(context.Background(), store, tc.hashes, tc.blocks)
			if !errors.Is(err, tc.want) || n != 0 {
				t.Fatalf("Load = %d, %v; want %v", n, err, tc.want)
			}
			if !bytes.Equal(before, mem) {
				t.Fatal("rejected load wrote into the cache")
			}
		})
	}
	if err := c.Save(context.Background(), store, []int{10}, []string{"z"}); !errors.Is(err, swap.ErrBadRequest) {
		t.Fatalf("Save of block 10: %v", err)
	}
}

func TestLoadRejectsValuesOfAnotherLayout(t *testing.T) {
	t.Parallel()
	small := testLayout
	small.HeadDim = 5
	saver, _, _ := hostCache(t, small, 0, Options{})
	loader, _, _ := hostCache(t, testLayout, 0, Options{})
	store := newMapStore()
	if err := saver.Save(context.Background(), store, []int{1}, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	if n, err := loader.Load(context.Background(), store, []string{"p"}, []int{1}); !errors.Is(err, layout.ErrInvalid) || n != 0 {
		t.Fatalf("Load = %d, %v; want ErrInvalid", n, err)
	}
}

func TestNewHostRejectsRegionsThatDoNotFit(t *testing.T) {
	t.Parallel()
	l := layout.Layout{Layers: 1, Blocks: 4, Heads: 1, BlockTokens: 2, HeadDim: 2, ElemBytes: 1} // 16-byte regions
	tests := []struct {
		name    string
		memLen  int
		offsets []int
	}{
		{"too few offsets", 64, []int{0}},
		{"region past the end", 40, []int{0, 30}},
		{"negative offset", 64, []int{-1, 16}},
		{"overlapping regions", 64, []int{0, 8}},
		{"offset near max int", 64, []int{0, int(^uint(0) >> 1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := NewHost(l, 0, make([]byte, tc.memLen), tc.offsets, Options{}); !errors.Is(err, layout.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	bad := l
	bad.ElemBytes = 4
	if _, err := NewHost(bad, 0, make([]byte, 1024), []int{0, 512}, Options{}); !errors.Is(err, layout.ErrInvalid) {
		t.Fatalf("4-byte elements: %v", err)
	}
}

// TestCloseWhileInUse unregisters a cache while a Save is inside the store:
// Close waits for that batch, the Save's next batch and later calls get
// ErrClosed.
func TestCloseWhileInUse(t *testing.T) {
	t.Parallel()
	c, _, _ := hostCache(t, testLayout, 0, Options{StagingSlots: 1, Stagings: 1})
	store := newMapStore()
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	store.putHook = func() { once.Do(func() { close(entered); <-proceed }) }
	saveErr := make(chan error, 1)
	go func() {
		saveErr <- c.Save(context.Background(), store, []int{0, 1, 2}, []string{"a", "b", "c"})
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	// Wait until Close is queued on the lock: a pending writer makes
	// TryRLock fail, and keeps the Save's next batch out until Close is done.
	for c.mu.TryRLock() {
		c.mu.RUnlock()
		time.Sleep(time.Millisecond)
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a batch was in flight")
	default:
	}
	close(proceed)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := <-saveErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("Save across Close: %v, want ErrClosed", err)
	}
	if _, err := c.Load(context.Background(), store, []string{"a"}, []int{3}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Load after Close: %v", err)
	}
}
