"""kvmesh's Python client: the kvmesh.v1 API (Client), memfd pools (Pool),
a Mooncake-style store (MooncakeStore), a FastDeploy-style adapter
(FastDeployStorage) and registered KV caches (KVCache, with query_ranks
for the minimum over tensor-parallel ranks). Needs only the
standard library, grpcio and protobuf."""

from .client import Client
from .fastdeploy import FastDeployStorage
from .kvcache import KVCache, Layout, MissingBlockError, RanksPresent, query_ranks, request_prefix
from .mooncake import MooncakeStore
from .pool import Pool, register_fd

__all__ = ["Client", "FastDeployStorage", "KVCache", "Layout", "MissingBlockError", "MooncakeStore", "Pool",
           "RanksPresent", "query_ranks", "register_fd", "request_prefix"]
