package localapi_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvmesh/kvmesh/agent"
	"github.com/kvmesh/kvmesh/agent/keys"
	"github.com/kvmesh/kvmesh/client"
	"github.com/kvmesh/kvmesh/gpu/layout"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// kvEnv is an in-process agent, a client, and a pool holding host caches.
type kvEnv struct {
	c    *client.Client
	kv   kvmeshv1.KVCacheClient
	pool *client.Pool
	cfg  agent.Config
}

func newKVEnv(t *testing.T, poolBytes int) *kvEnv {
	t.Helper()
	dir := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.DataDir, cfg.Socket, cfg.AdminAddr = dir, filepath.Join(dir, "agent.sock"), ""
	cfg.MemCapacity, cfg.DiskCapacity, cfg.MaxBlockSize = 16<<20, 0, 1<<20
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := agent.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	c, err := client.Dial(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	pool, err := client.NewPool(cfg.MempoolPath(), "kv-host-cache", poolBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return &kvEnv{c: c, kv: c.KVCache(), pool: pool, cfg: cfg}
}

// small is a layout with every feature: two layers, scale planes, 2-byte
// elements; a region is 8 blocks of 2*4*8*2 = 128 bytes.
var small = layout.Layout{Layers: 2, Blocks: 8, Heads: 2, BlockTokens: 4, HeadDim: 8, ElemBytes: 2, ScaleBytes: 4}

func protoLayout(l layout.Layout) *kvmeshv1.KVCacheLayout {
	return &kvmeshv1.KVCacheLayout{Layers: uint32(l.Layers), Blocks: uint32(l.Blocks), Heads: uint32(l.Heads),
		BlockTokens: uint32(l.BlockTokens), HeadDim: uint32(l.HeadDim), ElemBytes: uint32(l.ElemBytes),
		ScaleBytes: uint32(l.ScaleBytes)}
}

// packed places l's regions back to back from base, in layout order, and
// returns their offsets and the end.
func packed(l layout.Layout, base uint64) ([]uint64, uint64) {
	var offs []uint64
	for _, r := range l.Regions() {
		offs = append(offs, base)
		base += uint64(l.RegionBytesOf(r.Kind))
	}
	return offs, base
}

func hostCache(ns string, l layout.Layout, rank uint32, pool uint32, offs []uint64) *kvmeshv1.RegisterKVCacheRequest {
	return &kvmeshv1.RegisterKVCacheRequest{Namespace: ns, Layout: protoLayout(l), Rank: rank,
		Memory: &kvmeshv1.RegisterKVCacheRequest_Host{Host: &kvmeshv1.HostMemory{PoolId: pool, Offsets: offs}}}
}

func (e *kvEnv) register(t *testing.T, l layout.Layout, offs []uint64) uint64 {
	t.Helper()
	r, err := e.kv.RegisterKVCache(context.Background(), hostCache("", l, 0, e.pool.ID, offs))
	if err != nil {
		t.Fatal(err)
	}
	return r.CacheId
}

// fill writes a pattern unique to (seed, position) over mem.
func fill(mem []byte, seed uint64) {
	for i := 0; i+8 <= len(mem); i += 8 {
		x := seed ^ uint64(i)*0x9E3779B97F4A7C15
		x ^= x >> 31
		binary.LittleEndian.PutUint64(mem[i:], x*0xBF58476D1CE4E5B9)
	}
}

// blockBytes is block b of a cache at offs in mem: its chunk of every region.
func blockBytes(l layout.Layout, mem []byte, offs []uint64, b int) []byte {
	var out []byte
	for i, r := range l.Regions() {
		out = append(out, mem[int(offs[i])+b*r.Chunk:][:r.Chunk]...)
	}
	return out
}

func code(err error) codes.Code { return status.Code(err) }

func TestKVCacheSaveLoadByHashes(t *testing.T) {
	t.Parallel()
	offs, end := packed(small, 0)
	e := newKVEnv(t, int(end))
	fill(e.pool.Mem, 1)
	id := e.register(t, small, offs)
	ctx := context.Background()

	s, err := e.kv.Save(ctx, &kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{1, 3}, Hashes: []string{"h1", "h3"}})
	if err != nil || s.Saved != 2 {
		t.Fatalf("Save: %v %v", s, err)
	}
	found, err := e.c.Exist(ctx, "", [][]byte{[]byte("h1_key_0"), []byte("h1_value_0"), []byte("h3_key_0"), []byte("h3_value_0")})
	if err != nil || !found[0] || !found[1] || !found[2] || !found[3] {
		t.Fatalf("stored keys %v %v", found, err)
	}
	want1, want3, before7 := blockBytes(small, e.pool.Mem, offs, 1), blockBytes(small, e.pool.Mem, offs, 3), blockBytes(small, e.pool.Mem, offs, 7)

	l, err := e.kv.Load(ctx, &kvmeshv1.LoadBlocksRequest{CacheId: id, Hashes: []string{"h3", "h1", "nope"}, BlockIds: []uint32{5, 6, 7}})
	if err != nil || l.Loaded != 2 || l.FirstMissing != 2 {
		t.Fatalf("Load with a miss: %v %v", l, err)
	}
	if !bytes.Equal(blockBytes(small, e.pool.Mem, offs, 5), want3) || !bytes.Equal(blockBytes(small, e.pool.Mem, offs, 6), want1) {
		t.Fatal("loaded blocks differ from the saved ones")
	}
	if !bytes.Equal(blockBytes(small, e.pool.Mem, offs, 7), before7) {
		t.Fatal("the block after the miss was written")
	}
	l, err = e.kv.Load(ctx, &kvmeshv1.LoadBlocksRequest{CacheId: id, Hashes: []string{"h1"}, BlockIds: []uint32{0}})
	if err != nil || l.Loaded != 1 || l.FirstMissing != -1 {
		t.Fatalf("Load: %v %v", l, err)
	}
}

func TestKVCacheRequestByTokens(t *testing.T) {
	t.Parallel()
	offs, end := packed(small, 0)
	e := newKVEnv(t, int(end))
	fill(e.pool.Mem, 2)
	id := e.register(t, small, offs)
	ctx := context.Background()
	tokens := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10} // 2 full blocks of 4 and a tail of 2

	if _, err := e.kv.SaveRequest(ctx, &kvmeshv1.SaveTokensRequest{CacheId: id, Tokens: tokens, BlockIds: []uint32{0, 1, 2}}); err != nil {
		t.Fatal(err)
	}
	chain, err := keys.Chain(keys.DefaultNamespace, tokens, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(chain[2], []byte(":partial:2")) {
		t.Fatalf("tail key %q", chain[2])
	}
	found, err := e.c.Exist(ctx, "", [][]byte{stored(chain[2], "key"), stored(chain[2], "value")})
	if err != nil || !found[0] || !found[1] {
		t.Fatalf("the tail's keys are not stored: %v %v", found, err)
	}
	want := [][]byte{blockBytes(small, e.pool.Mem, offs, 0), blockBytes(small, e.pool.Mem, offs, 1), blockBytes(small, e.pool.Mem, offs, 2)}
	if err := e.c.LoadRequest(ctx, id, tokens, []uint32{7, 5, 3}); err != nil {
		t.Fatal(err)
	}
	for i, b := range []int{7, 5, 3} {
		if !bytes.Equal(blockBytes(small, e.pool.Mem, offs, b), want[i]) {
			t.Fatalf("block %d of the request (cache block %d) differs", i, b)
		}
	}

	// A missing block fails the whole request, names its index, and (as
	// the agent checks before copying) leaves the cache untouched.
	if _, err := e.c.Remove(ctx, "", [][]byte{stored(chain[1], "value")}); err != nil {
		t.Fatal(err)
	}
	fill(e.pool.Mem[offs[0]:end], 3)
	before := bytes.Clone(e.pool.Mem)
	err = e.c.LoadRequest(ctx, id, tokens, []uint32{4, 6, 7})
	var miss *client.MissingBlockError
	if !errors.As(err, &miss) || miss.Index != 1 || code(err) != codes.NotFound {
		t.Fatalf("LoadRequest with block 1 removed: %v", err)
	}
	if !bytes.Equal(e.pool.Mem, before) {
		t.Fatal("a failed LoadRequest wrote into the cache")
	}
}

// stored is the rank-0 store key of one kind ("key" or "value") of the
// block with engine hash h.
func stored(h []byte, kind string) []byte { return []byte(string(h) + "_" + kind + "_0") }
