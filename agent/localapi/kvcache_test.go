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

// Two tensor-parallel ranks: rank 1 lacks block 3 of a request, so every
// rank has 3 leading blocks, whether the ranks are named by their caches or
// by tp_size; each rank loads that prefix, and no more.
func TestKVCacheQueryRanksIsTheMinimum(t *testing.T) {
	t.Parallel()
	offs0, end0 := packed(small, 0)
	offs1, end := packed(small, end0)
	e := newKVEnv(t, int(end))
	fill(e.pool.Mem, 4)
	ctx := context.Background()
	var ids []uint64
	for rank, offs := range [][]uint64{offs0, offs1} {
		r, err := e.kv.RegisterKVCache(ctx, hostCache("", small, uint32(rank), e.pool.ID, offs))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.CacheId)
	}
	tokens := make([]int32, 18) // 4 full blocks of 4 and a tail of 2
	for i := range tokens {
		tokens[i] = int32(1000 + i)
	}
	src := []uint32{0, 1, 2, 3, 4}
	for _, id := range ids {
		if _, err := e.kv.SaveRequest(ctx, &kvmeshv1.SaveTokensRequest{CacheId: id, Tokens: tokens, BlockIds: src}); err != nil {
			t.Fatal(err)
		}
	}
	query := func(r *kvmeshv1.QueryRanksRequest) *kvmeshv1.QueryRanksResponse {
		t.Helper()
		r.Tokens = tokens
		q, err := e.kv.QueryRanks(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	if q := query(&kvmeshv1.QueryRanksRequest{CacheIds: ids}); q.Present != 5 || q.Blocks != 5 || q.ShortRank != -1 {
		t.Fatalf("all stored: %v", q)
	}

	chain, err := keys.Chain(keys.DefaultNamespace, tokens, small.BlockTokens)
	if err != nil {
		t.Fatal(err)
	}
	_, v := layout.StoredKeys(string(chain[3]), 1)
	if _, err := e.c.Remove(ctx, "", [][]byte{[]byte(v)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  *kvmeshv1.QueryRanksRequest
		want uint32
	}{
		{"by caches", &kvmeshv1.QueryRanksRequest{CacheIds: ids}, 3},
		{"by caches, rank 1 first", &kvmeshv1.QueryRanksRequest{CacheIds: []uint64{ids[1], ids[0]}}, 3},
		{"by tp_size", &kvmeshv1.QueryRanksRequest{TpSize: 2, BlockTokens: uint32(small.BlockTokens)}, 3},
		{"rank 0 alone", &kvmeshv1.QueryRanksRequest{CacheIds: ids[:1]}, 5},
		{"tp_size 1", &kvmeshv1.QueryRanksRequest{Namespace: "default", TpSize: 1, BlockTokens: uint32(small.BlockTokens)}, 5},
	} {
		q := query(tc.req)
		wantShort := int32(1)
		if tc.want == 5 {
			wantShort = -1
		}
		if q.Present != tc.want || q.Blocks != 5 || q.ShortRank != wantShort {
			t.Errorf("%s: %v, want present %d of 5, short rank %d", tc.name, q, tc.want, wantShort)
		}
	}
	if n, err := e.c.QueryRanks(ctx, ids, tokens); err != nil || n != 3 {
		t.Fatalf("client QueryRanks: %d %v", n, err)
	}
	if n, err := e.c.QueryModelRanks(ctx, "", 2, small.BlockTokens, tokens); err != nil || n != 3 {
		t.Fatalf("client QueryModelRanks: %d %v", n, err)
	}

	// Every rank loads the common prefix; rank 1 cannot load more.
	dst := []uint32{7, 6, 5, 4, 3}
	for rank, id := range ids {
		pt, pb := client.RequestPrefix(tokens, dst, 3, small.BlockTokens)
		if err := e.c.LoadRequest(ctx, id, pt, pb); err != nil {
			t.Fatalf("rank %d loading 3 blocks: %v", rank, err)
		}
		offs := [][]uint64{offs0, offs1}[rank]
		for i := range 3 {
			if !bytes.Equal(blockBytes(small, e.pool.Mem, offs, int(dst[i])), blockBytes(small, e.pool.Mem, offs, int(src[i]))) {
				t.Fatalf("rank %d: block %d of the request loaded wrong", rank, i)
			}
		}
	}
	var miss *client.MissingBlockError
	if err := e.c.LoadRequest(ctx, ids[1], tokens, dst); !errors.As(err, &miss) || miss.Index != 3 {
		t.Fatalf("rank 1 loading all: %v", err)
	}

	// By hashes, as Save stores them.
	for rank, id := range ids {
		hs := []string{"a", "b", "c"}[:3-rank]
		if _, err := e.kv.Save(ctx, &kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{0, 1, 2}[:len(hs)], Hashes: hs}); err != nil {
			t.Fatal(err)
		}
	}
	q, err := e.kv.QueryRanks(ctx, &kvmeshv1.QueryRanksRequest{CacheIds: ids, Hashes: []string{"a", "b", "c"}})
	if err != nil || q.Present != 2 || q.Blocks != 3 || q.ShortRank != 1 {
		t.Fatalf("by hashes: %v %v", q, err)
	}
}

func TestKVCacheQueryRanksRefusesBadInput(t *testing.T) {
	t.Parallel()
	offs, end := packed(small, 0)
	e := newKVEnv(t, int(end))
	id := e.register(t, small, offs)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  *kvmeshv1.QueryRanksRequest
		want codes.Code
	}{
		{"no ranks", &kvmeshv1.QueryRanksRequest{Tokens: []int32{1}}, codes.InvalidArgument},
		{"tp_size too large", &kvmeshv1.QueryRanksRequest{TpSize: 1 << 20, BlockTokens: 4, Tokens: []int32{1}}, codes.InvalidArgument},
		{"tokens without block_tokens", &kvmeshv1.QueryRanksRequest{TpSize: 2, Tokens: []int32{1}}, codes.InvalidArgument},
		{"caches and tp_size", &kvmeshv1.QueryRanksRequest{CacheIds: []uint64{id}, TpSize: 2, Tokens: []int32{1}}, codes.InvalidArgument},
		{"tokens and hashes", &kvmeshv1.QueryRanksRequest{CacheIds: []uint64{id}, Tokens: []int32{1}, Hashes: []string{"h"}}, codes.InvalidArgument},
		{"an empty hash", &kvmeshv1.QueryRanksRequest{CacheIds: []uint64{id}, Hashes: []string{""}}, codes.InvalidArgument},
		{"unknown cache", &kvmeshv1.QueryRanksRequest{CacheIds: []uint64{id, 999}, Tokens: []int32{1}}, codes.NotFound},
		{"unknown namespace", &kvmeshv1.QueryRanksRequest{Namespace: "nope", TpSize: 1, BlockTokens: 4, Tokens: []int32{1}}, codes.NotFound},
	} {
		if _, err := e.kv.QueryRanks(ctx, tc.req); code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	q, err := e.kv.QueryRanks(ctx, &kvmeshv1.QueryRanksRequest{CacheIds: []uint64{id}})
	if err != nil || q.Present != 0 || q.Blocks != 0 || q.ShortRank != -1 {
		t.Fatalf("an empty request: %v %v", q, err)
	}
}
