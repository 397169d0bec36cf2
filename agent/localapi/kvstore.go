package localapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/gpu/cuda"
	"github.com/kvmesh/kvmesh/gpu/kvcache"
	"github.com/kvmesh/kvmesh/gpu/layout"
	"github.com/kvmesh/kvmesh/gpu/swap"
)

// FirstMissingTrailer is the trailing-metadata key under which a failed
// LoadRequest names the index of its first missing block.
const FirstMissingTrailer = "kvmesh-first-missing"

// kvStore is a registered cache's view of the block store: one namespace,
// one durability for every Put, and per stored key the chain metadata of a
// token-id save (absent for saves by engine hash).
type kvStore struct {
	st    Backend
	ns    string
	opts  store.PutOptions
	chain map[string]store.PutOptions // by stored key; nil: none
}

var _ kvcache.Store = kvStore{}

// Put copies value into the store (Backend.Put copies what it keeps).
func (k kvStore) Put(_ context.Context, key string, value []byte) error {
	opts := k.opts
	if c, ok := k.chain[key]; ok {
		c.Durability = opts.Durability
		opts = c
	}
	return k.st.Put(k.ns, []byte(key), [][]byte{value}, opts)
}

// Get fills dst, which must be exactly the stored block's size; a miss wraps
// kvcache.ErrNotFound, as Load needs to report the first missing block.
func (k kvStore) Get(_ context.Context, key string, dst []byte) (int, error) {
	n, err := k.st.Get(k.ns, []byte(key), [][]byte{dst})
	if store.IsNotFound(err) {
		return 0, fmt.Errorf("%w: %w", kvcache.ErrNotFound, err)
	}
	return int(n), err
}

// kvStatus turns a Save or Load failure into the status the engine sees.
func kvStatus(err error) error {
	var miss *kvcache.MissingError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &miss):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, kvcache.ErrClosed):
		return status.Error(codes.FailedPrecondition, "KV cache unregistered during the call")
	case errors.Is(err, swap.ErrBadRequest), errors.Is(err, layout.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, cuda.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	c := codes.Unavailable
	switch store.CodeOf(err) {
	case store.CodeNotFound, store.CodeUnknownNamespace:
		c = codes.NotFound
	case store.CodeInvalidKey, store.CodeInvalidArgument, store.CodeTooLarge:
		c = codes.InvalidArgument
	case store.CodeBufferSize: // stored by a cache of another layout
		c = codes.FailedPrecondition
	case store.CodeNoSpace:
		c = codes.ResourceExhausted
	case store.CodeCorrupt:
		c = codes.DataLoss
	case store.CodeIO:
		c = codes.Internal
	}
	return status.Error(c, err.Error())
}

// missingStatus is LoadRequest's NOT_FOUND: the index of the first block
// not stored goes in the message and in the trailer FirstMissingTrailer.
func missingStatus(ctx context.Context, index int, why string) error {
	grpc.SetTrailer(ctx, metadata.Pairs(FirstMissingTrailer, strconv.Itoa(index)))
	return status.Errorf(codes.NotFound, "block %d of the request is not stored (%s); nothing of the request counts as loaded", index, why)
}
