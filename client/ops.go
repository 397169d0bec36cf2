package client

import (
	"context"

	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// errs turns per-key Results into nil or *KeyError.
func errs(rs []*kvmeshv1.Result) []error {
	out := make([]error, len(rs))
	for i, r := range rs {
		out[i] = check(r)
	}
	return out
}

// BatchPut stores inline values (the small-value path); per key: nil or a
// *KeyError.
func (c *Client) BatchPut(ctx context.Context, ns string, keys, vals [][]byte, d kvmeshv1.Durability) ([]error, error) {
	items := make([]*kvmeshv1.Item, len(keys))
	for i := range keys {
		items[i] = &kvmeshv1.Item{Key: keys[i], Value: vals[i]}
	}
	resp, err := c.rpc.BatchPut(ctx, &kvmeshv1.BatchPutRequest{Namespace: ns, Items: items, Durability: d})
	if err != nil {
		return nil, err
	}
	return errs(resp.Results), nil
}

// BatchGet returns inline values; per key: the value, or a *KeyError.
func (c *Client) BatchGet(ctx context.Context, ns string, keys [][]byte) ([][]byte, []error, error) {
	resp, err := c.rpc.BatchGet(ctx, &kvmeshv1.KeysRequest{Namespace: ns, Keys: keys})
	if err != nil {
		return nil, nil, err
	}
	return resp.Values, errs(resp.Results), nil
}

// Pin keeps blocks from eviction until Unpin.
func (c *Client) Pin(ctx context.Context, ns string, keys [][]byte) ([]error, error) {
	resp, err := c.rpc.Pin(ctx, &kvmeshv1.KeysRequest{Namespace: ns, Keys: keys})
	if err != nil {
		return nil, err
	}
	return errs(resp.Results), nil
}

// Unpin undoes one Pin per key.
func (c *Client) Unpin(ctx context.Context, ns string, keys [][]byte) ([]error, error) {
	resp, err := c.rpc.Unpin(ctx, &kvmeshv1.KeysRequest{Namespace: ns, Keys: keys})
	if err != nil {
		return nil, err
	}
	return errs(resp.Results), nil
}

// Clear removes every block of the namespace and returns how many.
func (c *Client) Clear(ctx context.Context, ns string) (uint64, error) {
	resp, err := c.rpc.Clear(ctx, &kvmeshv1.ClearRequest{Namespace: ns})
	if err != nil {
		return 0, err
	}
	return resp.Removed, nil
}

// Match returns how many leading blocks of the token sequence are stored.
func (c *Client) Match(ctx context.Context, ns string, tokens []int32, blockTokens int) (int, error) {
	resp, err := c.rpc.Match(ctx, &kvmeshv1.TokensRequest{Namespace: ns, Tokens: tokens, BlockTokens: uint32(blockTokens)})
	if err != nil {
		return 0, err
	}
	return int(resp.Present), nil
}

// WriteTokens stores one inline value per block of the token sequence.
func (c *Client) WriteTokens(ctx context.Context, ns string, tokens []int32, blockTokens int, blocks [][]byte, d kvmeshv1.Durability) ([]error, error) {
	resp, err := c.rpc.WriteTokens(ctx, &kvmeshv1.WriteTokensRequest{Namespace: ns, Tokens: tokens,
		BlockTokens: uint32(blockTokens), Blocks: blocks, Durability: d})
	if err != nil {
		return nil, err
	}
	return errs(resp.Results), nil
}

// ReadTokens returns the blocks of a token sequence inline; per block: the
// value, or a *KeyError.
func (c *Client) ReadTokens(ctx context.Context, ns string, tokens []int32, blockTokens int) ([][]byte, []error, error) {
	resp, err := c.rpc.ReadTokens(ctx, &kvmeshv1.TokensRequest{Namespace: ns, Tokens: tokens, BlockTokens: uint32(blockTokens)})
	if err != nil {
		return nil, nil, err
	}
	return resp.Values, errs(resp.Results), nil
}
