"""kvmesh.v1 client over the agent's Unix socket."""

import grpc

from ._proto import kvmesh_pb2 as pb
from ._proto.rpc import Stub
from .pool import Pool, default_mempool_socket, socket_path

# Per-key codes (docs/errors.md).
NOT_FOUND = -1
INVALID_KEY = -2
TOO_LARGE = -3
UNKNOWN_NAMESPACE = -4
NO_SPACE = -5
IO_ERROR = -6
CORRUPT = -7
BUFFER_SIZE = -8
INVALID_ARGUMENT = -9
UNAVAILABLE = -10
OUT_OF_RANGE = -11
UNKNOWN_POOL = -12

_MAX_MESSAGE = 1 << 30


def _key(k):
    return k.encode("utf-8") if isinstance(k, str) else bytes(k)


def _buffer(pool_id, iovecs):
    return pb.PoolBuffer(pool_id=pool_id, iovecs=[pb.Iovec(offset=o, length=n) for o, n in iovecs])


class Client:
    """One connection to an agent. Results of batch ops are, per key, bytes
    moved (>= 0) or a negative code above."""

    def __init__(self, socket, mempool_socket=None, namespace="default"):
        self.socket = socket_path(socket)
        self.mempool_socket = mempool_socket or default_mempool_socket(self.socket)
        self.namespace = namespace
        self.channel = grpc.insecure_channel(
            "unix://" + self.socket,
            options=[("grpc.max_send_message_length", _MAX_MESSAGE),
                     ("grpc.max_receive_message_length", _MAX_MESSAGE)])
        self.rpc = Stub(self.channel, pb, "Store")

    def close(self):
        self.channel.close()

    def new_pool(self, size, name="kvmesh-python"):
        """A memfd pool of size bytes registered with this agent."""
        return Pool(self.mempool_socket, name, size)

    # Inline bytes: the small-value path.
    def put(self, key, value, durability=pb.DURABILITY_MEMORY):
        r = self.rpc.Put(pb.PutRequest(namespace=self.namespace, key=_key(key), value=bytes(value),
                                       durability=durability))
        return r.result.value

    def get(self, key):
        """(value, code): value is None unless code >= 0."""
        r = self.rpc.Get(pb.GetRequest(namespace=self.namespace, key=_key(key)))
        return (r.value if r.result.value >= 0 else None), r.result.value

    # Pool ops: items are (key, pool_id, [(offset, length), ...]).
    def pool_batch_put(self, items, durability=pb.DURABILITY_MEMORY):
        r = self.rpc.PoolBatchPut(pb.PoolBatchRequest(
            namespace=self.namespace, durability=durability,
            items=[pb.PoolItem(key=_key(k), buffer=_buffer(p, iovs)) for k, p, iovs in items]))
        return [x.value for x in r.results]

    def pool_batch_get(self, items):
        r = self.rpc.PoolBatchGet(pb.PoolBatchRequest(
            namespace=self.namespace,
            items=[pb.PoolItem(key=_key(k), buffer=_buffer(p, iovs)) for k, p, iovs in items]))
        return [x.value for x in r.results]

    def pool_write_tokens(self, tokens, block_tokens, buffers, durability=pb.DURABILITY_MEMORY):
        """buffers: one (pool_id, [(offset, length), ...]) per block."""
        r = self.rpc.PoolWriteTokens(pb.PoolTokensRequest(
            namespace=self.namespace, tokens=tokens, block_tokens=block_tokens, durability=durability,
            buffers=[_buffer(p, iovs) for p, iovs in buffers]))
        return [x.value for x in r.results]

    def pool_read_tokens(self, tokens, block_tokens, buffers):
        r = self.rpc.PoolReadTokens(pb.PoolTokensRequest(
            namespace=self.namespace, tokens=tokens, block_tokens=block_tokens,
            buffers=[_buffer(p, iovs) for p, iovs in buffers]))
        return [x.value for x in r.results]

    def match(self, tokens, block_tokens):
        return self.rpc.Match(pb.TokensRequest(namespace=self.namespace, tokens=tokens,
                                               block_tokens=block_tokens)).present

    # Index ops.
    def exist(self, keys):
        return list(self.rpc.Exist(pb.KeysRequest(namespace=self.namespace, keys=[_key(k) for k in keys])).exists)

    def query(self, keys):
        return self.rpc.Query(pb.KeysRequest(namespace=self.namespace, keys=[_key(k) for k in keys])).present

    def remove(self, keys):
        r = self.rpc.Remove(pb.KeysRequest(namespace=self.namespace, keys=[_key(k) for k in keys]))
        return [x.value for x in r.results]

    def clear(self):
        return self.rpc.Clear(pb.ClearRequest(namespace=self.namespace)).removed

    def stat(self):
        return self.rpc.Stat(pb.StatRequest())
