package localapi

import (
	"context"

	"github.com/kvmesh/kvmesh/agent/mempool"
	"github.com/kvmesh/kvmesh/agent/store"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// WithPools lets the pool ops reach the pools registered in reg.
func (s *Server) WithPools(reg *mempool.Registry) *Server {
	s.pools = reg
	return s
}

func iovecs(b *kvmeshv1.PoolBuffer) (uint32, []iovec) {
	out := make([]iovec, len(b.GetIovecs()))
	for i, v := range b.GetIovecs() {
		out[i] = iovec{v.Offset, v.Length}
	}
	return b.GetPoolId(), out
}

func (s *Server) PoolBatchPut(_ context.Context, r *kvmeshv1.PoolBatchRequest) (*kvmeshv1.BatchResponse, error) {
	d, err := durability(r.Durability)
	if err != nil {
		return nil, err
	}
	out := &kvmeshv1.BatchResponse{Results: make([]*kvmeshv1.Result, len(r.Items))}
	for i, it := range r.Items {
		id, iovs := iovecs(it.Buffer)
		out.Results[i] = result(putPool(s.store, s.pools, r.Namespace, it.Key, id, iovs, store.PutOptions{Durability: d}))
	}
	return out, nil
}

func (s *Server) PoolBatchGet(_ context.Context, r *kvmeshv1.PoolBatchRequest) (*kvmeshv1.BatchResponse, error) {
	out := &kvmeshv1.BatchResponse{Results: make([]*kvmeshv1.Result, len(r.Items))}
	for i, it := range r.Items {
		id, iovs := iovecs(it.Buffer)
		out.Results[i] = result(getPoolPrefix(s.store, s.pools, r.Namespace, it.Key, id, iovs))
	}
	return out, nil
}

// tokenKeys returns a token request's chain keys, one per buffer; a
// count mismatch fails the whole request.
func (s *Server) tokenKeys(r *kvmeshv1.PoolTokensRequest) ([][]byte, error) {
	ks, err := s.store.ChainKeys(r.Namespace, r.Tokens, int(r.BlockTokens))
	if err != nil {
		return nil, requestError(err)
	}
	if len(ks) != len(r.Buffers) {
		return nil, requestError(&store.Error{Code: store.CodeInvalidArgument,
			Msg: "need one buffer per block of the token sequence"})
	}
	return ks, nil
}

func (s *Server) PoolWriteTokens(_ context.Context, r *kvmeshv1.PoolTokensRequest) (*kvmeshv1.BatchResponse, error) {
	d, err := durability(r.Durability)
	if err != nil {
		return nil, err
	}
	ks, err := s.tokenKeys(r)
	if err != nil {
		return nil, err
	}
	bt := int(r.BlockTokens)
	out := &kvmeshv1.BatchResponse{Results: make([]*kvmeshv1.Result, len(ks))}
	for i, k := range ks {
		// The same options WriteTokens gives, so policies see chains alike.
		opt := store.PutOptions{Durability: d, Tokens: uint32(min(bt, len(r.Tokens)-i*bt)), ChainPos: uint32(i)}
		if i > 0 {
			opt.Parent = ks[i-1]
		}
		id, iovs := iovecs(r.Buffers[i])
		out.Results[i] = result(putPool(s.store, s.pools, r.Namespace, k, id, iovs, opt))
	}
	return out, nil
}

func (s *Server) PoolReadTokens(_ context.Context, r *kvmeshv1.PoolTokensRequest) (*kvmeshv1.BatchResponse, error) {
	ks, err := s.tokenKeys(r)
	if err != nil {
		return nil, err
	}
	out := &kvmeshv1.BatchResponse{Results: make([]*kvmeshv1.Result, len(ks))}
	for i, k := range ks {
		id, iovs := iovecs(r.Buffers[i])
		out.Results[i] = result(getPoolPrefix(s.store, s.pools, r.Namespace, k, id, iovs))
	}
	return out, nil
}
