package tests

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvmesh/kvmesh/agent/keys"
	"github.com/kvmesh/kvmesh/client"
	"github.com/kvmesh/kvmesh/gpu/layout"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// pdLayout is a realistic rank's cache: 32 layers, 8 KV heads, 64-token
// pages, head_dim 128, 2-byte elements (a stored value is 4 MiB, a block
// 8 MiB), 12 pages per layer.
var pdLayout = layout.Layout{Layers: 32, Blocks: 12, Heads: 8, BlockTokens: 64, HeadDim: 128, ElemBytes: 2}

// engineCache is an engine process's host-resident KV cache: a memfd on
// the node of the agent it talks to, registered with that agent.
type engineCache struct {
	c    *client.Client
	pool *client.Pool
	offs []uint64
	id   uint64
}

func newEngineCache(t *testing.T, a *agentProc, l layout.Layout, rank int) *engineCache {
	t.Helper()
	var offs []uint64
	var size uint64
	for _, r := range l.Regions() {
		offs = append(offs, size)
		size += uint64(l.RegionBytesOf(r.Kind))
	}
	c := a.client()
	pool, err := client.NewPool(client.DefaultMempoolSocket(a.socket), "engine-kv-cache", int(size))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	r, err := c.KVCache().RegisterKVCache(context.Background(), &kvmeshv1.RegisterKVCacheRequest{
		Rank: uint32(rank),
		Layout: &kvmeshv1.KVCacheLayout{Layers: uint32(l.Layers), Blocks: uint32(l.Blocks), Heads: uint32(l.Heads),
			BlockTokens: uint32(l.BlockTokens), HeadDim: uint32(l.HeadDim), ElemBytes: uint32(l.ElemBytes)},
		Memory: &kvmeshv1.RegisterKVCacheRequest_Host{Host: &kvmeshv1.HostMemory{PoolId: pool.ID, Offsets: offs}}})
	if err != nil {
		t.Fatal(err)
	}
	return &engineCache{c: c, pool: pool, offs: offs, id: r.CacheId}
}

// block is cache block b's bytes: its chunk of every region, in order.
func (e *engineCache) block(b int) []byte {
	var out []byte
	for i, r := range pdLayout.Regions() {
		out = append(out, e.pool.Mem[int(e.offs[i])+b*r.Chunk:][:r.Chunk]...)
	}
	return out
}

// pdAgents are the agents the prefill and the decode engine talk to: two
// agents of one mesh on 127.0.0.1 and 127.0.0.2, each block replicated to
// both (R = 2), so the decode side reads what the prefill side wrote on
// another node.
func pdAgents(t *testing.T) (prefill, decode *agentProc) {
	caDir := filepath.Join(t.TempDir(), "ca")
	kvmeshRun(t, "tls", "ca", "create", "--out", caDir)
	a, seed := startMeshAgent(t, "127.0.0.1", nodeCert(t, caDir, "prefill"), "", 2, "--mem-capacity", "256MiB")
	b, _ := startMeshAgent(t, "127.0.0.2", nodeCert(t, caDir, "decode"), seed, 2, "--mem-capacity", "256MiB")
	waitMembers(t, a, "both alive", alive("prefill", "decode"))
	waitMembers(t, b, "both alive", alive("prefill", "decode"))
	return a, b
}

// TestPDRequestThroughStore is prefill→decode disaggregation through the
// store: the prefill engine saves a 10.5-block request (the partial tail
// included) by token ids, the decode engine loads it by the same token ids
// into other block ids of its own cache, byte for byte; with one block
// removed the load fails naming that block, and loads nothing. Both
// engines run two tensor-parallel ranks: the decode side's scheduler asks
// how many leading blocks every rank has, and each rank loads that many.
func TestPDRequestThroughStore(t *testing.T) {
	prefillAgent, decodeAgent := pdAgents(t)
	prefill := newEngineCache(t, prefillAgent, pdLayout, 0)
	decode := newEngineCache(t, decodeAgent, pdLayout, 0)
	prefill1 := newEngineCache(t, prefillAgent, pdLayout, 1)
	decode1 := newEngineCache(t, decodeAgent, pdLayout, 1)
	ctx := context.Background()

	tokens := make([]int32, 10*pdLayout.BlockTokens+pdLayout.BlockTokens/2)
	for i := range tokens {
		tokens[i] = int32(i*7919 + 13)
	}
	src := []uint32{11, 3, 7, 0, 9, 1, 5, 10, 2, 8, 4}
	dst := make([]uint32, len(src))
	for i := range dst {
		dst[i] = uint32((5*i + 3) % pdLayout.Blocks) // distinct, and never src[i]
	}
	for rank, p := range []*engineCache{prefill, prefill1} {
		for i := 0; i+8 <= len(p.pool.Mem); i += 8 {
			binary.LittleEndian.PutUint64(p.pool.Mem[i:], uint64(i)*0x9E3779B97F4A7C15^0x5DEECE66D^uint64(rank))
		}
		s, err := p.c.KVCache().SaveRequest(ctx, &kvmeshv1.SaveTokensRequest{CacheId: p.id, Tokens: tokens, BlockIds: src,
			Durability: kvmeshv1.Durability_DURABILITY_REPLICATED})
		if err != nil || s.Saved != 11 {
			t.Fatalf("rank %d SaveRequest: %v %v", rank, s, err)
		}
	}
	if n, err := decode.c.QueryRanks(ctx, []uint64{decode.id, decode1.id}, tokens); err != nil || n != 11 {
		t.Fatalf("QueryRanks: %d %v, want all 11 blocks", n, err)
	}
	if err := decode.c.LoadRequest(ctx, decode.id, tokens, dst); err != nil {
		t.Fatal(err)
	}
	for i := range src {
		if !bytes.Equal(decode.block(int(dst[i])), prefill.block(int(src[i]))) {
			t.Fatalf("block %d of the request: decode block %d differs from prefill block %d", i, dst[i], src[i])
		}
	}

	// Rank 1 lacks block 6 (one of its keys removed at its owners): every
	// rank has 6 leading blocks, which each rank loads; rank 1 cannot load
	// more.
	chain, err := keys.Chain(keys.DefaultNamespace, tokens, pdLayout.BlockTokens)
	if err != nil {
		t.Fatal(err)
	}
	_, v1 := layout.StoredKeys(string(chain[6]), 1)
	if errs, err := prefill1.c.Remove(ctx, "", [][]byte{[]byte(v1)}); err != nil || errs[0] != nil {
		t.Fatalf("remove %s: %v %v", v1, err, errs)
	}
	n, err := decode.c.QueryModelRanks(ctx, "", 2, pdLayout.BlockTokens, tokens)
	if err != nil || n != 6 {
		t.Fatalf("QueryModelRanks with rank 1 lacking block 6: %d %v", n, err)
	}
	for rank, d := range []*engineCache{decode, decode1} {
		pt, pb := client.RequestPrefix(tokens, dst, n, pdLayout.BlockTokens)
		if err := d.c.LoadRequest(ctx, d.id, pt, pb); err != nil {
			t.Fatalf("rank %d loading the common %d blocks: %v", rank, n, err)
		}
	}
	for i := range n {
		if !bytes.Equal(decode1.block(int(dst[i])), prefill1.block(int(src[i]))) {
			t.Fatalf("rank 1, block %d of the request: decode block %d differs from prefill block %d", i, dst[i], src[i])
		}
	}
	var miss *client.MissingBlockError
	if err := decode1.c.LoadRequest(ctx, decode1.id, tokens, dst); !errors.As(err, &miss) || miss.Index != 6 {
		t.Fatalf("rank 1 loading all 11 blocks: %v", err)
	}

	// Remove block 4 (both its keys are needed; drop one) at its owners.
	if !bytes.HasSuffix(chain[10], []byte(":partial:32")) {
		t.Fatalf("the tail's chain key %q", chain[10])
	}
	k, _ := layout.StoredKeys(string(chain[4]), 0)
	if errs, err := prefill.c.Remove(ctx, "", [][]byte{[]byte(k)}); err != nil || errs[0] != nil {
		t.Fatalf("remove %s: %v %v", k, err, errs)
	}
	if n, err := decode.c.QueryRanks(ctx, []uint64{decode.id, decode1.id}, tokens); err != nil || n != 4 {
		t.Fatalf("QueryRanks with rank 0 lacking block 4: %d %v", n, err)
	}
	clear(decode.pool.Mem)
	err = decode.c.LoadRequest(ctx, decode.id, tokens, dst)
	if !errors.As(err, &miss) || miss.Index != 4 || status.Code(err) != codes.NotFound {
		t.Fatalf("LoadRequest with block 4 removed: %v", err)
	}
	for i, b := range decode.pool.Mem {
		if b != 0 {
			t.Fatalf("a failed LoadRequest wrote into the decode cache (byte %d)", i)
		}
	}
}
