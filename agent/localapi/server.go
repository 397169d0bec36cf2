// Package localapi serves the store to engines and tools on the node:
// gRPC over the agent's Unix socket (proto/kvmesh/v1).
package localapi

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvmesh/kvmesh/agent/mempool"
	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/policy"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// Server implements kvmesh.v1.Store over a block store.
type Server struct {
	kvmeshv1.UnimplementedStoreServer
	store   Backend
	pools   *mempool.Registry // nil: pool ops fail with UNKNOWN_POOL
	cluster Cluster           // nil: single-node mode
	version string
	started time.Time
}

// New returns a server for st; version is reported by Stat.
func New(st Backend, version string) *Server {
	return &Server{store: st, version: version, started: time.Now()}
}

func result(n uint64, err error) *kvmeshv1.Result {
	if err != nil {
		return &kvmeshv1.Result{Value: int64(store.CodeOf(err)), Error: err.Error()}
	}
	return &kvmeshv1.Result{Value: int64(n)}
}

func results(rs []store.Result) []*kvmeshv1.Result {
	out := make([]*kvmeshv1.Result, len(rs))
	for i, r := range rs {
		out[i] = result(r.Bytes, r.Err)
	}
	return out
}

// requestError turns a whole-request failure into a gRPC status.
func requestError(err error) error {
	switch store.CodeOf(err) {
	case store.CodeUnknownNamespace:
		return status.Error(codes.NotFound, err.Error())
	case store.CodeInvalidKey, store.CodeInvalidArgument:
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

func durability(d kvmeshv1.Durability) (policy.Durability, error) {
	switch d {
	case kvmeshv1.Durability_DURABILITY_MEMORY:
		return policy.DurableMemory, nil
	case kvmeshv1.Durability_DURABILITY_DISK:
		return policy.DurableDisk, nil
	case kvmeshv1.Durability_DURABILITY_REPLICATED:
		return policy.DurableReplicated, nil
	}
	return 0, status.Errorf(codes.InvalidArgument, "unknown durability %d", d)
}

func (s *Server) Put(_ context.Context, r *kvmeshv1.PutRequest) (*kvmeshv1.PutResponse, error) {
	d, err := durability(r.Durability)
	if err != nil {
		return nil, err
	}
	err = s.store.Put(r.Namespace, r.Key, [][]byte{r.Value},
		store.PutOptions{Durability: d, Tokens: r.Tokens, Parent: r.Parent})
	return &kvmeshv1.PutResponse{Result: result(uint64(len(r.Value)), err)}, nil
}

func (s *Server) Get(_ context.Context, r *kvmeshv1.GetRequest) (*kvmeshv1.GetResponse, error) {
	v, err := s.getInline(r.Namespace, r.Key)
	return &kvmeshv1.GetResponse{Result: result(uint64(len(v)), err), Value: v}, nil
}

// getInline reads a block into a fresh buffer, retrying if the key is
// replaced by a block of another size between sizing and reading.
func (s *Server) getInline(ns string, key []byte) ([]byte, error) {
	for {
		size, err := s.store.Size(ns, key)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size)
		_, err = s.store.Get(ns, key, [][]byte{buf})
		if store.CodeOf(err) == store.CodeBufferSize {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf, nil
	}
}

func (s *Server) BatchPut(_ context.Context, r *kvmeshv1.BatchPutRequest) (*kvmeshv1.BatchResponse, error) {
	d, err := durability(r.Durability)
	if err != nil {
		return nil, err
	}
	items := make([]store.PutItem, len(r.Items))
	for i, it := range r.Items {
		items[i] = store.PutItem{Key: it.Key, Value: [][]byte{it.Value}, Opts: store.PutOptions{Durability: d}}
	}
	return &kvmeshv1.BatchResponse{Results: results(s.store.BatchPut(r.Namespace, items))}, nil
}

func (s *Server) BatchGet(_ context.Context, r *kvmeshv1.KeysRequest) (*kvmeshv1.BatchGetResponse, error) {
	out := &kvmeshv1.BatchGetResponse{Results: make([]*kvmeshv1.Result, len(r.Keys)), Values: make([][]byte, len(r.Keys))}
	for i, k := range r.Keys {
		v, err := s.getInline(r.Namespace, k)
		out.Results[i], out.Values[i] = result(uint64(len(v)), err), v
	}
	return out, nil
}

func (s *Server) Exist(_ context.Context, r *kvmeshv1.KeysRequest) (*kvmeshv1.ExistResponse, error) {
	found, err := s.store.Exist(r.Namespace, r.Keys)
	if err != nil {
		return nil, requestError(err)
	}
	return &kvmeshv1.ExistResponse{Exists: found}, nil
}

func (s *Server) Query(_ context.Context, r *kvmeshv1.KeysRequest) (*kvmeshv1.QueryResponse, error) {
	n, err := s.store.Query(r.Namespace, r.Keys)
	if err != nil {
		return nil, requestError(err)
	}
	return &kvmeshv1.QueryResponse{Present: uint32(n)}, nil
}

// perKey applies op to each key, collecting per-key results.
func perKey(keys [][]byte, op func(key []byte) error) *kvmeshv1.BatchResponse {
	out := &kvmeshv1.BatchResponse{Results: make([]*kvmeshv1.Result, len(keys))}
	for i, k := range keys {
		out.Results[i] = result(0, op(k))
	}
	return out
}

func (s *Server) Remove(_ context.Context, r *kvmeshv1.KeysRequest) (*kvmeshv1.BatchResponse, error) {
	return perKey(r.Keys, func(k []byte) error { return s.store.Remove(r.Namespace, k) }), nil
}

func (s *Server) Pin(_ context.Context, r *kvmeshv1.KeysRequest) (*kvmeshv1.BatchResponse, error) {
	return perKey(r.Keys, func(k []byte) error { return s.store.Pin(r.Namespace, k) }), nil
}

func (s *Server) Unpin(_ context.Context, r *kvmeshv1.KeysRequest) (*kvmeshv1.BatchResponse, error) {
	return perKey(r.Keys, func(k []byte) error { return s.store.Unpin(r.Namespace, k) }), nil
}

func (s *Server) Clear(_ context.Context, r *kvmeshv1.ClearRequest) (*kvmeshv1.ClearResponse, error) {
	n, err := s.store.Clear(r.Namespace)
	if err != nil {
		return nil, requestError(err)
	}
	return &kvmeshv1.ClearResponse{Removed: uint64(n)}, nil
}

func (s *Server) Match(_ context.Context, r *kvmeshv1.TokensRequest) (*kvmeshv1.QueryResponse, error) {
	n, err := s.store.Match(r.Namespace, r.Tokens, int(r.BlockTokens))
	if err != nil {
		return nil, requestError(err)
	}
	return &kvmeshv1.QueryResponse{Present: uint32(n)}, nil
}

func (s *Server) WriteTokens(_ context.Context, r *kvmeshv1.WriteTokensRequest) (*kvmeshv1.BatchResponse, error) {
	d, err := durability(r.Durability)
	if err != nil {
		return nil, err
	}
	blocks := make([][][]byte, len(r.Blocks))
	for i, b := range r.Blocks {
		blocks[i] = [][]byte{b}
	}
	rs, err := s.store.WriteTokens(r.Namespace, r.Tokens, int(r.BlockTokens), blocks, d)
	if err != nil {
		return nil, requestError(err)
	}
	return &kvmeshv1.BatchResponse{Results: results(rs)}, nil
}

func (s *Server) ReadTokens(_ context.Context, r *kvmeshv1.TokensRequest) (*kvmeshv1.BatchGetResponse, error) {
	ks, err := s.store.ChainKeys(r.Namespace, r.Tokens, int(r.BlockTokens))
	if err != nil {
		return nil, requestError(err)
	}
	return s.BatchGet(context.Background(), &kvmeshv1.KeysRequest{Namespace: r.Namespace, Keys: ks})
}

func (s *Server) Stat(context.Context, *kvmeshv1.StatRequest) (*kvmeshv1.StatResponse, error) {
	st := s.store.Stat()
	out := &kvmeshv1.StatResponse{
		Namespaces: st.Namespaces, Blocks: st.Blocks, Pinned: st.Pinned,
		CorruptDropped: st.CorruptDropped, Demotions: st.Demotions, Prefetched: st.Prefetched,
		DiskWriteErrors: st.DiskWriteErrs, MaxBlockSize: st.MaxBlockSize,
		Version: s.version, UptimeSeconds: time.Since(s.started).Seconds(),
	}
	for _, t := range st.Tiers {
		out.Tiers = append(out.Tiers, &kvmeshv1.TierStat{Tier: t.Tier, CapacityBytes: t.CapacityBytes,
			UsedBytes: t.UsedBytes, Blocks: t.Blocks, Hits: t.Hits, Misses: t.Misses, Evictions: t.Evictions})
	}
	return out, nil
}
