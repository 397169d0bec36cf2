"""An engine's KV cache registered with the agent (kvmesh.v1.KVCache): the
agent moves blocks between the cache and the store itself.

The cache is layer-major: per layer a K and a V region of shape [blocks,
heads, block_tokens, head_dim] (elem_bytes each), then optional per-block
scale planes. Regions are listed in this order: K of every layer, V of every
layer, then (scale_bytes > 0) K scale and V scale of every layer.

    cache = KVCache.host(client, Layout(layers=32, blocks=1000, heads=8,
                                         block_tokens=64, head_dim=128, elem_bytes=2))
    # the engine computes in cache.pool.mem; then:
    cache.save_request(token_ids, block_ids)            # prefill side
    cache.load_request(token_ids, other_block_ids)      # decode side

With tensor parallelism each rank registers its own cache (its rank) and
loads into it; the scheduler asks once how many leading blocks every rank
has and has each rank load that many:

    n = query_ranks(client, token_ids, caches=rank_caches).present  # or tp_size=, block_tokens=
    cache.load_request(token_ids, block_ids, blocks=n)              # on every rank
"""

from collections import namedtuple

import grpc

from ._proto import kvcache_pb2 as pb
from ._proto import kvmesh_pb2
from ._proto.rpc import Stub

Layout = namedtuple("Layout", "layers blocks heads block_tokens head_dim elem_bytes scale_bytes",
                    defaults=(0,))

# query_ranks' answer: leading blocks stored for every rank, blocks in the
# request, and a rank lacking block `present` (-1 when none does).
RanksPresent = namedtuple("RanksPresent", "present blocks short_rank")

# Trailing metadata naming a failed load_request's first missing block.
FIRST_MISSING = "kvmesh-first-missing"


class MissingBlockError(Exception):
    """load_request failed: block `index` of the request is not stored, and
    the request as a whole is not loaded."""

    def __init__(self, index, detail):
        super().__init__("block %d of the request is not stored: %s" % (index, detail))
        self.index = index


def region_sizes(layout):
    """The byte size of every region, in registration order."""
    chunk = layout.heads * layout.block_tokens * layout.head_dim * layout.elem_bytes
    sizes = [layout.blocks * chunk] * (2 * layout.layers)
    if layout.scale_bytes:
        sizes += [layout.blocks * layout.scale_bytes] * (2 * layout.layers)
    return sizes


def packed_offsets(layout, base=0):
    """Offsets of the regions laid back to back from base, and the end."""
    offsets = []
    for size in region_sizes(layout):
        offsets.append(base)
        base += size
    return offsets, base


def request_prefix(tokens, block_ids, blocks, block_tokens):
    """The first `blocks` blocks of a request: the tokens they hold (the
    partial tail included when blocks covers it) and their block ids. Their
    chain keys are the request's own."""
    blocks = max(0, min(blocks, len(block_ids)))
    return tokens[:blocks * block_tokens], block_ids[:blocks]


def query_ranks(client, tokens=None, hashes=None, caches=None, tp_size=0, block_tokens=0, namespace=None):
    """How many leading blocks of a request are stored for every
    tensor-parallel rank: the minimum over the ranks, i.e. how many blocks
    each rank can load.

    The request is its token ids (chain keys, as save_request stores them)
    or its block hashes (as save takes them). The ranks are either the
    registered caches, one per rank (KVCache objects or cache ids), or, for
    a scheduler that holds none, ranks 0 .. tp_size-1 of the client's
    namespace (or `namespace`) with block_tokens tokens per block. Returns
    a RanksPresent."""
    req = pb.QueryRanksRequest(tokens=tokens or [], hashes=hashes or [])
    if caches is not None:
        req.cache_ids.extend(c.id if isinstance(c, KVCache) else c for c in caches)
    else:
        req.namespace = client.namespace if namespace is None else namespace
        req.tp_size, req.block_tokens = tp_size, block_tokens
    r = Stub(client.channel, pb, "KVCache").QueryRanks(req)
    return RanksPresent(r.present, r.blocks, r.short_rank)


def _layout(l):
    return pb.KVCacheLayout(layers=l.layers, blocks=l.blocks, heads=l.heads, block_tokens=l.block_tokens,
                            head_dim=l.head_dim, elem_bytes=l.elem_bytes, scale_bytes=l.scale_bytes)


class KVCache:
    """A registered cache. Errors are grpc.RpcError with the agent's status
    (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, UNAVAILABLE)."""

    def __init__(self, client, request, pool=None, owns_pool=False):
        self.rpc = Stub(client.channel, pb, "KVCache")
        self.layout = Layout(*(getattr(request.layout, f) for f in Layout._fields))
        self.pool, self._owns_pool = pool, owns_pool
        self.id = self.rpc.RegisterKVCache(request).cache_id

    @classmethod
    def host(cls, client, layout, rank=0, pool=None, offsets=None):
        """A host-resident cache. Without pool, a memfd pool of the packed
        size is allocated and owned (cache.pool.mem is the cache's memory);
        with one (a kvmesh.Pool), offsets say where each region starts."""
        owns = pool is None
        if owns:
            offsets, size = packed_offsets(layout)
            pool = client.new_pool(size, name="kvmesh-kv-cache")
        req = pb.RegisterKVCacheRequest(namespace=client.namespace, layout=_layout(layout), rank=rank,
                                        host=pb.HostMemory(pool_id=pool.id, offsets=offsets))
        try:
            return cls(client, req, pool, owns)
        except BaseException:
            if owns:
                pool.close()
            raise

    @classmethod
    def cuda(cls, client, layout, device, regions, rank=0):
        """A device-resident cache: regions are (ipc_handle, offset) pairs in
        registration order, the 64-byte cudaIpcMemHandle_t of each region's
        allocation (e.g. from torch's storage._share_cuda_()) and the
        region's offset inside it. Passed to the agent as they are."""
        req = pb.RegisterKVCacheRequest(
            namespace=client.namespace, layout=_layout(layout), rank=rank,
            cuda=pb.CudaIPCMemory(device=device, regions=[pb.CudaIPCRegion(handle=bytes(h), offset=o)
                                                          for h, o in regions]))
        return cls(client, req)

    def save(self, block_ids, hashes, durability=kvmesh_pb2.DURABILITY_MEMORY):
        """Stores block block_ids[i] under hashes[i]; returns blocks saved."""
        return self.rpc.Save(pb.SaveBlocksRequest(cache_id=self.id, block_ids=block_ids, hashes=hashes,
                                                  durability=durability)).saved

    def load(self, hashes, block_ids):
        """Loads a leading run of the blocks: (loaded, first_missing), -1
        when none is missing."""
        r = self.rpc.Load(pb.LoadBlocksRequest(cache_id=self.id, hashes=hashes, block_ids=block_ids))
        return r.loaded, r.first_missing

    def save_request(self, tokens, block_ids, durability=kvmesh_pb2.DURABILITY_MEMORY):
        """Saves every block of a token sequence (one block id per
        block_tokens tokens, the partial tail included) under the chain keys
        of docs/keys.md; returns blocks saved."""
        return self.rpc.SaveRequest(pb.SaveTokensRequest(cache_id=self.id, tokens=tokens, block_ids=block_ids,
                                                         durability=durability)).saved

    def load_request(self, tokens, block_ids, blocks=None):
        """Loads every block of a token sequence, or raises
        MissingBlockError naming the first one not stored. With blocks,
        only the request's first `blocks` blocks (query_ranks' answer, so
        that no rank loads more than every rank has)."""
        if blocks is not None:
            tokens, block_ids = request_prefix(tokens, block_ids, blocks, self.layout.block_tokens)
        try:
            self.rpc.LoadRequest(pb.LoadTokensRequest(cache_id=self.id, tokens=tokens, block_ids=block_ids))
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                for k, v in e.trailing_metadata() or ():
                    if k == FIRST_MISSING:
                        raise MissingBlockError(int(v), e.details()) from None
            raise

    def close(self):
        """Unregisters the cache (and frees the pool it allocated)."""
        if self.id:
            try:
                self.rpc.UnregisterKVCache(pb.UnregisterKVCacheRequest(cache_id=self.id))
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:  # already gone with its pool
                    raise
            self.id = 0
        if self._owns_pool and self.pool is not None:
            self.pool.close()
            self.pool = None
