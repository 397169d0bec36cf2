package client

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// firstMissingTrailer is where the agent names a failed LoadRequest's first
// missing block (agent/localapi.FirstMissingTrailer).
const firstMissingTrailer = "kvmesh-first-missing"

// KVCache is the generated client of the KV-cache service (register a
// cache, Save/Load by block ids and hashes or by token ids).
func (c *Client) KVCache() kvmeshv1.KVCacheClient { return kvmeshv1.NewKVCacheClient(c.conn) }

// MissingBlockError is a LoadRequest that failed because block Index of the
// request is not stored; the request as a whole did not load.
type MissingBlockError struct {
	Index int
	Err   error // the agent's NOT_FOUND status
}

func (e *MissingBlockError) Error() string {
	return fmt.Sprintf("block %d of the request is missing: %v", e.Index, e.Err)
}

func (e *MissingBlockError) Unwrap() error { return e.Err }

// LoadRequest loads every block of a token sequence into the cache's
// blockIDs (one per block_tokens tokens, rounded up), or fails; a missing
// block is a *MissingBlockError naming its index.
func (c *Client) LoadRequest(ctx context.Context, cacheID uint64, tokens []int32, blockIDs []uint32) error {
	var tr metadata.MD
	_, err := c.KVCache().LoadRequest(ctx, &kvmeshv1.LoadTokensRequest{CacheId: cacheID, Tokens: tokens, BlockIds: blockIDs},
		grpc.Trailer(&tr))
	if v := tr.Get(firstMissingTrailer); err != nil && len(v) == 1 {
		if i, perr := strconv.Atoi(v[0]); perr == nil {
			return &MissingBlockError{Index: i, Err: err}
		}
	}
	return err
}

// QueryRanks returns how many leading blocks of a token sequence are
// stored for every one of the caches, one registered per tensor-parallel
// rank: the minimum over the ranks, and so how many blocks each rank can
// load (LoadRequest with RequestPrefix of the tokens and its block ids).
func (c *Client) QueryRanks(ctx context.Context, cacheIDs []uint64, tokens []int32) (int, error) {
	r, err := c.KVCache().QueryRanks(ctx, &kvmeshv1.QueryRanksRequest{CacheIds: cacheIDs, Tokens: tokens})
	if err != nil {
		return 0, err
	}
	return int(r.Present), nil
}

// QueryModelRanks is QueryRanks for a process that holds no cache (a
// scheduler): the ranks are 0 .. tpSize-1 of the namespace's model, whose
// caches hold blockTokens tokens per block.
func (c *Client) QueryModelRanks(ctx context.Context, ns string, tpSize, blockTokens int, tokens []int32) (int, error) {
	r, err := c.KVCache().QueryRanks(ctx, &kvmeshv1.QueryRanksRequest{Namespace: ns, TpSize: uint32(tpSize),
		BlockTokens: uint32(blockTokens), Tokens: tokens})
	if err != nil {
		return 0, err
	}
	return int(r.Present), nil
}

// RequestPrefix cuts a request down to its first blocks blocks of
// blockTokens tokens: the tokens they hold (the partial tail included when
// blocks covers it) and their block ids, as LoadRequest takes them. The
// prefix's chain keys are the request's own, so loading it loads the
// request's leading blocks.
func RequestPrefix(tokens []int32, blockIDs []uint32, blocks, blockTokens int) ([]int32, []uint32) {
	blocks = max(0, min(blocks, len(blockIDs)))
	return tokens[:min(len(tokens), blocks*blockTokens)], blockIDs[:blocks]
}
