package client

import (
	"context"

	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// Iovec is a span of a pool.
type Iovec struct{ Offset, Length uint64 }

// PoolItem is one key of a pool batch: its bytes are the concatenation of
// Iovecs in the pool with id PoolID.
type PoolItem struct {
	Key    []byte
	PoolID uint32
	Iovecs []Iovec
}

func poolBuffer(id uint32, iovs []Iovec) *kvmeshv1.PoolBuffer {
	b := &kvmeshv1.PoolBuffer{PoolId: id, Iovecs: make([]*kvmeshv1.Iovec, len(iovs))}
	for i, v := range iovs {
		b.Iovecs[i] = &kvmeshv1.Iovec{Offset: v.Offset, Length: v.Length}
	}
	return b
}

func poolItems(items []PoolItem) []*kvmeshv1.PoolItem {
	out := make([]*kvmeshv1.PoolItem, len(items))
	for i, it := range items {
		out[i] = &kvmeshv1.PoolItem{Key: it.Key, Buffer: poolBuffer(it.PoolID, it.Iovecs)}
	}
	return out
}

// values turns per-key Results into bytes moved (>= 0) or negative codes.
func values(rs []*kvmeshv1.Result) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.GetValue()
	}
	return out
}

// PoolBatchPut stores each item's pool bytes; per key: bytes stored or a
// negative code (docs/errors.md).
func (c *Client) PoolBatchPut(ctx context.Context, ns string, items []PoolItem, d kvmeshv1.Durability) ([]int64, error) {
	resp, err := c.rpc.PoolBatchPut(ctx, &kvmeshv1.PoolBatchRequest{Namespace: ns, Items: poolItems(items), Durability: d})
	if err != nil {
		return nil, err
	}
	return values(resp.Results), nil
}

// PoolBatchGet reads each block into the start of its item's iovecs (at
// least the block's size); per key: the block's size or a negative code.
func (c *Client) PoolBatchGet(ctx context.Context, ns string, items []PoolItem) ([]int64, error) {
	resp, err := c.rpc.PoolBatchGet(ctx, &kvmeshv1.PoolBatchRequest{Namespace: ns, Items: poolItems(items)})
	if err != nil {
		return nil, err
	}
	return values(resp.Results), nil
}

// PoolBuffer is one block's place in a pool, for the token ops.
type PoolBuffer struct {
	PoolID uint32
	Iovecs []Iovec
}

func tokenBuffers(bufs []PoolBuffer) []*kvmeshv1.PoolBuffer {
	out := make([]*kvmeshv1.PoolBuffer, len(bufs))
	for i, b := range bufs {
		out[i] = poolBuffer(b.PoolID, b.Iovecs)
	}
	return out
}

// PoolWriteTokens stores one pool buffer per block of the token sequence
// under its chain keys (docs/keys.md).
func (c *Client) PoolWriteTokens(ctx context.Context, ns string, tokens []int32, blockTokens int, bufs []PoolBuffer, d kvmeshv1.Durability) ([]int64, error) {
	resp, err := c.rpc.PoolWriteTokens(ctx, &kvmeshv1.PoolTokensRequest{Namespace: ns, Tokens: tokens,
		BlockTokens: uint32(blockTokens), Buffers: tokenBuffers(bufs), Durability: d})
	if err != nil {
		return nil, err
	}
	return values(resp.Results), nil
}

// PoolReadTokens reads the blocks of a token sequence into pool buffers.
func (c *Client) PoolReadTokens(ctx context.Context, ns string, tokens []int32, blockTokens int, bufs []PoolBuffer) ([]int64, error) {
	resp, err := c.rpc.PoolReadTokens(ctx, &kvmeshv1.PoolTokensRequest{Namespace: ns, Tokens: tokens,
		BlockTokens: uint32(blockTokens), Buffers: tokenBuffers(bufs)})
	if err != nil {
		return nil, err
	}
	return values(resp.Results), nil
}
