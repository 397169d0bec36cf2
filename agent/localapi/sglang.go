package localapi

import (
	"context"

	"google.golang.org/grpc/codes"

	"github.com/kvmesh/kvmesh/agent/keys"
	"github.com/kvmesh/kvmesh/agent/mempool"
	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/proto/sglang/runtime/hicache"
)

// HiCache serves SGLang HiCache's `rpc` storage protocol
// (sglang.runtime.hicache.StorageServer) over the store, in the default
// namespace, so SGLang can use kvmesh as its L3 unchanged.
type HiCache struct {
	hicache.UnimplementedStorageServerServer
	store Backend
	pools *mempool.Registry
}

// NewHiCache returns the SGLang service over st, moving bytes through the
// pools registered in reg.
func NewHiCache(st Backend, reg *mempool.Registry) *HiCache {
	return &HiCache{store: st, pools: reg}
}

// sglangCode is the per-item result SGLang expects: 0, or the gRPC status
// code number its reference server uses for the failure.
func sglangCode(err error) int32 {
	if err == nil {
		return int32(codes.OK)
	}
	switch store.CodeOf(err) {
	case store.CodeNotFound:
		return int32(codes.NotFound)
	case store.CodeOutOfRange:
		return int32(codes.OutOfRange)
	case store.CodeUnknownPool:
		return int32(codes.FailedPrecondition)
	case store.CodeInvalidArgument, store.CodeBufferSize, store.CodeInvalidKey, store.CodeTooLarge:
		return int32(codes.InvalidArgument)
	case store.CodeNoSpace:
		return int32(codes.ResourceExhausted)
	case store.CodeCorrupt:
		return int32(codes.DataLoss)
	case store.CodeIO:
		return int32(codes.Internal)
	}
	return int32(codes.Unavailable)
}

func transfer(t *hicache.Transfer) (uint32, []iovec) {
	out := make([]iovec, len(t.GetIovec()))
	for i, v := range t.GetIovec() {
		out[i] = iovec{v.Offset, uint64(v.Length)}
	}
	// A negative id is as unknown as any unregistered one.
	if t.GetPoolId() < 0 {
		return ^uint32(0), out
	}
	return uint32(t.GetPoolId()), out
}

func (h *HiCache) Exist(_ context.Context, r *hicache.ExistRequest) (*hicache.ExistResponse, error) {
	found, err := h.store.Exist(keys.DefaultNamespace, r.Id)
	if err != nil {
		return nil, requestError(err)
	}
	return &hicache.ExistResponse{Results: found}, nil
}

func (h *HiCache) BatchPut(_ context.Context, r *hicache.BatchPutRequest) (*hicache.BatchPutResponse, error) {
	out := &hicache.BatchPutResponse{Results: make([]int32, len(r.Puts))}
	for i, t := range r.Puts {
		id, iovs := transfer(t)
		_, err := putPool(h.store, h.pools, keys.DefaultNamespace, t.Id, id, iovs, store.PutOptions{})
		out.Results[i] = sglangCode(err)
	}
	return out, nil
}

func (h *HiCache) BatchGet(_ context.Context, r *hicache.BatchGetRequest) (*hicache.BatchGetResponse, error) {
	out := &hicache.BatchGetResponse{Results: make([]int32, len(r.Gets))}
	for i, t := range r.Gets {
		id, iovs := transfer(t)
		_, err := getPoolExact(h.store, h.pools, keys.DefaultNamespace, t.Id, id, iovs)
		out.Results[i] = sglangCode(err)
	}
	return out, nil
}
