package localapi

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvmesh/kvmesh/agent/keys"
	"github.com/kvmesh/kvmesh/agent/mempool"
	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/gpu/cuda"
	"github.com/kvmesh/kvmesh/gpu/kvcache"
	"github.com/kvmesh/kvmesh/gpu/layout"
	"github.com/kvmesh/kvmesh/gpu/swap"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// stagingBytes bounds one staging buffer of a registered cache; a cache
// keeps two, so Saves and Loads two deep overlap.
const stagingBytes = 32 << 20

// KVCache serves kvmesh.v1.KVCache: engines register their KV caches and
// the agent moves blocks between them and the store (gpu/kvcache). Every
// block id is checked before any copy and a host cache's regions are
// checked against its pool at registration, so no request writes outside
// registered memory; every failure is a status for that request alone.
type KVCache struct {
	kvmeshv1.UnimplementedKVCacheServer
	store  Backend
	caches *kvCaches
}

// NewKVCache returns the service over st; host caches live in the pools of
// reg.
func NewKVCache(st Backend, reg *mempool.Registry) *KVCache {
	return &KVCache{store: st, caches: newKVCaches(reg)}
}

func layoutOf(l *kvmeshv1.KVCacheLayout) layout.Layout {
	return layout.Layout{Layers: int(l.GetLayers()), Blocks: int(l.GetBlocks()), Heads: int(l.GetHeads()),
		BlockTokens: int(l.GetBlockTokens()), HeadDim: int(l.GetHeadDim()), ElemBytes: int(l.GetElemBytes()),
		ScaleBytes: int(l.GetScaleBytes())}
}

func (s *KVCache) RegisterKVCache(_ context.Context, r *kvmeshv1.RegisterKVCacheRequest) (*kvmeshv1.RegisterKVCacheResponse, error) {
	if _, err := s.store.Exist(r.Namespace, nil); err != nil {
		return nil, requestError(err)
	}
	l := layoutOf(r.Layout)
	if err := l.Validate(); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if limit := s.store.Stat().MaxBlockSize; uint64(l.ValueBytes()) > limit {
		return nil, status.Errorf(codes.InvalidArgument, "a stored value of this layout is %d bytes, over the agent's --max-block-size %d",
			l.ValueBytes(), limit)
	}
	opts := kvcache.Options{StagingSlots: max(1, stagingBytes/l.SlotBytes()), Stagings: 2}
	e := &kvEntry{ns: r.Namespace, rank: int(r.Rank)}
	var err error
	switch m := r.Memory.(type) {
	case *kvmeshv1.RegisterKVCacheRequest_Host:
		e.cache, e.pool, err = s.openHost(l, int(r.Rank), m.Host, opts)
	case *kvmeshv1.RegisterKVCacheRequest_Cuda:
		e.cache, err = openCUDA(l, int(r.Rank), m.Cuda, opts)
	default:
		return nil, status.Error(codes.InvalidArgument, "no memory: name a host pool or CUDA IPC handles")
	}
	if err != nil {
		return nil, err
	}
	return &kvmeshv1.RegisterKVCacheResponse{CacheId: s.caches.add(e)}, nil
}

// openHost maps the cache onto its pool. The pool must be sealed against
// shrinking: the swap core is C, where a fault on a cut page cannot be
// recovered.
func (s *KVCache) openHost(l layout.Layout, rank int, m *kvmeshv1.HostMemory, opts kvcache.Options) (*kvcache.Cache, *mempool.Pool, error) {
	p, err := s.caches.reg.Acquire(m.PoolId)
	if err != nil {
		return nil, nil, status.Errorf(codes.FailedPrecondition, "pool %d is not registered on the mempool socket", m.PoolId)
	}
	defer p.Release()
	if !p.Sealed {
		return nil, nil, status.Errorf(codes.FailedPrecondition,
			"pool %d cannot be sealed against shrinking: create its memfd with MFD_ALLOW_SEALING", m.PoolId)
	}
	mem, err := p.Span(0, p.Size())
	if err != nil {
		return nil, nil, status.Error(codes.Internal, err.Error())
	}
	offsets := make([]int, len(m.Offsets))
	for i, o := range m.Offsets {
		if o > uint64(len(mem)) {
			return nil, nil, status.Errorf(codes.InvalidArgument, "region %d offset %d outside the %d-byte pool", i, o, len(mem))
		}
		offsets[i] = int(o)
	}
	c, err := kvcache.NewHost(l, rank, mem, offsets, opts)
	if err != nil {
		return nil, nil, kvStatus(err)
	}
	return c, p, nil
}

// openCUDA opens the engine's device allocations through CUDA IPC.
func openCUDA(l layout.Layout, rank int, m *kvmeshv1.CudaIPCMemory, opts kvcache.Options) (*kvcache.Cache, error) {
	regions := make([]cuda.IPCRegion, len(m.Regions))
	for i, r := range m.Regions {
		if len(r.Handle) != len(regions[i].Handle) {
			return nil, status.Errorf(codes.InvalidArgument, "region %d: IPC handle of %d bytes, want %d", i, len(r.Handle), len(regions[i].Handle))
		}
		copy(regions[i].Handle[:], r.Handle)
		regions[i].Offset = r.Offset
	}
	dev, err := cuda.OpenIPC(int(m.Device), l, regions)
	if err != nil {
		return nil, kvStatus(fmt.Errorf("opening the CUDA IPC handles: %w", err))
	}
	c, err := kvcache.NewCUDA(dev, rank, opts)
	if err != nil {
		return nil, kvStatus(err)
	}
	return c, nil
}

func (s *KVCache) UnregisterKVCache(_ context.Context, r *kvmeshv1.UnregisterKVCacheRequest) (*kvmeshv1.UnregisterKVCacheResponse, error) {
	if !s.caches.drop(r.CacheId) {
		return nil, status.Errorf(codes.NotFound, "no KV cache %d is registered", r.CacheId)
	}
	return &kvmeshv1.UnregisterKVCacheResponse{}, nil
}

func ints(vs []uint32) []int {
	out := make([]int, len(vs))
	for i, v := range vs {
		out[i] = int(v)
	}
	return out
}

func (s *KVCache) Save(ctx context.Context, r *kvmeshv1.SaveBlocksRequest) (*kvmeshv1.SaveResponse, error) {
	for i, h := range r.Hashes {
		if h == "" {
			return nil, status.Errorf(codes.InvalidArgument, "hash %d is empty", i)
		}
	}
	return s.save(ctx, r.CacheId, r.BlockIds, r.Durability, func(*kvEntry) ([]string, map[string]store.PutOptions, error) {
		return r.Hashes, nil, nil
	})
}

func (s *KVCache) SaveRequest(ctx context.Context, r *kvmeshv1.SaveTokensRequest) (*kvmeshv1.SaveResponse, error) {
	return s.save(ctx, r.CacheId, r.BlockIds, r.Durability, func(e *kvEntry) ([]string, map[string]store.PutOptions, error) {
		return s.chain(e, r.Tokens, len(r.BlockIds))
	})
}

// save runs a Save once hashes has named each block's hash (and, for a
// token sequence, the chain metadata of its stored keys).
func (s *KVCache) save(ctx context.Context, id uint64, blockIDs []uint32, d kvmeshv1.Durability,
	hashes func(*kvEntry) ([]string, map[string]store.PutOptions, error)) (*kvmeshv1.SaveResponse, error) {
	dur, err := durability(d)
	if err != nil {
		return nil, err
	}
	e, release, err := s.caches.use(id)
	if err != nil {
		return nil, err
	}
	defer release()
	hs, chain, err := hashes(e)
	if err != nil {
		return nil, err
	}
	st := kvStore{st: s.store, ns: e.ns, opts: store.PutOptions{Durability: dur}, chain: chain}
	if err := e.cache.Save(ctx, st, ints(blockIDs), hs); err != nil {
		return nil, kvStatus(err)
	}
	return &kvmeshv1.SaveResponse{Saved: uint32(len(hs))}, nil
}

// chain is the hash of each block of a token sequence — its chain key
// (docs/keys.md), ":partial:N" for a short tail — and the chain metadata
// of their stored keys (tokens, position, the previous block's key of the
// same kind). The sequence must make exactly blocks blocks of the cache's
// block_tokens.
func (s *KVCache) chain(e *kvEntry, tokens []int32, blocks int) ([]string, map[string]store.PutOptions, error) {
	bt := e.cache.Layout().BlockTokens
	ks, err := s.store.ChainKeys(e.ns, tokens, bt)
	if err != nil {
		return nil, nil, requestError(err)
	}
	if len(ks) != blocks {
		return nil, nil, status.Errorf(codes.InvalidArgument, "%d tokens make %d blocks of %d tokens, got %d block ids",
			len(tokens), len(ks), bt, blocks)
	}
	hs := make([]string, len(ks))
	meta := make(map[string]store.PutOptions, 2*len(ks))
	var prevK, prevV string
	for i, k := range ks {
		hs[i] = string(k)
		kk, vk := e.cache.Keys(hs[i])
		n := uint32(min(bt, len(tokens)-i*bt))
		meta[kk] = store.PutOptions{Tokens: n, ChainPos: uint32(i), Parent: []byte(prevK)}
		meta[vk] = store.PutOptions{Tokens: n, ChainPos: uint32(i), Parent: []byte(prevV)}
		prevK, prevV = kk, vk
	}
	return hs, meta, nil
}

func (s *KVCache) Load(ctx context.Context, r *kvmeshv1.LoadBlocksRequest) (*kvmeshv1.LoadResponse, error) {
	e, release, err := s.caches.use(r.CacheId)
	if err != nil {
		return nil, err
	}
	defer release()
	n, err := e.cache.Load(ctx, kvStore{st: s.store, ns: e.ns}, r.Hashes, ints(r.BlockIds))
	var miss *kvcache.MissingError
	if errors.As(err, &miss) {
		return &kvmeshv1.LoadResponse{Loaded: uint32(n), FirstMissing: int32(miss.Index)}, nil
	}
	if err != nil {
		return nil, kvStatus(err)
	}
	return &kvmeshv1.LoadResponse{Loaded: uint32(n), FirstMissing: -1}, nil
}

// LoadRequest checks that every block is stored before it writes any, so
// the usual miss leaves the cache untouched; a block removed between the
// check and its copy fails the request the same way.
func (s *KVCache) LoadRequest(ctx context.Context, r *kvmeshv1.LoadTokensRequest) (*kvmeshv1.LoadResponse, error) {
	e, release, err := s.caches.use(r.CacheId)
	if err != nil {
		return nil, err
	}
	defer release()
	blocks := ints(r.BlockIds)
	if err := swap.CheckDestinationBlocks(blocks, e.cache.Layout().Blocks); err != nil {
		return nil, kvStatus(err)
	}
	hs, _, err := s.chain(e, r.Tokens, len(blocks))
	if err != nil {
		return nil, err
	}
	ks := make([][]byte, 0, 2*len(hs))
	for _, h := range hs {
		k, v := e.cache.Keys(h)
		ks = append(ks, []byte(k), []byte(v))
	}
	present, err := s.store.Query(e.ns, ks)
	if err != nil {
		return nil, requestError(err)
	}
	if present < len(ks) {
		return nil, missingStatus(ctx, present/2, "not in the store")
	}
	_, err = e.cache.Load(ctx, kvStore{st: s.store, ns: e.ns}, hs, blocks)
	var miss *kvcache.MissingError
	if errors.As(err, &miss) {
		return nil, missingStatus(ctx, miss.Index, "removed during the load")
	}
	if err != nil {
		return nil, kvStatus(err)
	}
	return &kvmeshv1.LoadResponse{Loaded: uint32(len(hs)), FirstMissing: -1}, nil
}

// maxQueryRanks bounds a QueryRanks request's tp_size.
const maxQueryRanks = 1024

// rankKeys gives, for a block hash, one rank's stored keys.
type rankKeys struct {
	rank int
	keys func(hash string) (key, value string)
}

// QueryRanks reports the leading blocks of a request stored for every
// rank: the minimum of the ranks' leading runs. After the first rank each
// rank is asked only about the run still common to all, so a rank holding
// more than the others is not warmed beyond what they share.
func (s *KVCache) QueryRanks(_ context.Context, r *kvmeshv1.QueryRanksRequest) (*kvmeshv1.QueryRanksResponse, error) {
	if len(r.Tokens) > 0 && len(r.Hashes) > 0 {
		return nil, status.Error(codes.InvalidArgument, "name the request by tokens or by hashes, not both")
	}
	for i, h := range r.Hashes {
		if h == "" {
			return nil, status.Errorf(codes.InvalidArgument, "hash %d is empty", i)
		}
	}
	ns, bt, ranks, err := s.queryRanks(r)
	if err != nil {
		return nil, err
	}
	hs := r.Hashes
	if len(r.Tokens) > 0 {
		ks, err := s.store.ChainKeys(ns, r.Tokens, bt)
		if err != nil {
			return nil, requestError(err)
		}
		hs = make([]string, len(ks))
		for i, k := range ks {
			hs[i] = string(k)
		}
	}
	present, short := len(hs), -1
	ks := make([][]byte, 0, 2*len(hs))
	for _, rk := range ranks {
		if present == 0 {
			break
		}
		ks = ks[:0]
		for _, h := range hs[:present] {
			k, v := rk.keys(h)
			ks = append(ks, []byte(k), []byte(v))
		}
		run, err := s.store.Query(ns, ks)
		if err != nil {
			return nil, requestError(err)
		}
		if run/2 < present {
			present, short = run/2, rk.rank
		}
	}
	return &kvmeshv1.QueryRanksResponse{Present: uint32(present), Blocks: uint32(len(hs)), ShortRank: int32(short)}, nil
}

// queryRanks resolves a QueryRanks request's ranks: its namespace, the
// block_tokens of its caches (0 if not known and not needed) and each
// rank's stored keys.
func (s *KVCache) queryRanks(r *kvmeshv1.QueryRanksRequest) (ns string, bt int, ranks []rankKeys, err error) {
	norm := func(ns string) string {
		if ns == "" {
			return keys.DefaultNamespace
		}
		return ns
	}
	if len(r.CacheIds) == 0 {
		if r.TpSize == 0 || r.TpSize > maxQueryRanks {
			return "", 0, nil, status.Errorf(codes.InvalidArgument, "name the ranks: cache_ids, or tp_size between 1 and %d", maxQueryRanks)
		}
		if len(r.Tokens) > 0 && r.BlockTokens == 0 {
			return "", 0, nil, status.Error(codes.InvalidArgument, "block_tokens is needed to split tokens into blocks")
		}
		for rank := range int(r.TpSize) {
			ranks = append(ranks, rankKeys{rank: rank, keys: func(h string) (string, string) { return layout.StoredKeys(h, rank) }})
		}
		return norm(r.Namespace), int(r.BlockTokens), ranks, nil
	}
	if r.Namespace != "" || r.TpSize != 0 || r.BlockTokens != 0 {
		return "", 0, nil, status.Error(codes.InvalidArgument, "name the ranks by cache_ids or by namespace, tp_size and block_tokens, not both")
	}
	for i, id := range r.CacheIds {
		e, release, err := s.caches.use(id)
		if err != nil {
			return "", 0, nil, err
		}
		release() // only the cache's description is needed, not its memory
		l := e.cache.Layout()
		if i == 0 {
			ns, bt = norm(e.ns), l.BlockTokens
		} else if norm(e.ns) != ns {
			return "", 0, nil, status.Errorf(codes.InvalidArgument, "cache %d is in namespace %q, cache %d in %q", id, norm(e.ns), r.CacheIds[0], ns)
		} else if l.BlockTokens != bt && len(r.Tokens) > 0 {
			return "", 0, nil, status.Errorf(codes.InvalidArgument, "cache %d has %d tokens per block, cache %d %d", id, l.BlockTokens, r.CacheIds[0], bt)
		}
		ranks = append(ranks, rankKeys{rank: e.rank, keys: e.cache.Keys})
	}
	return ns, bt, ranks, nil
}
