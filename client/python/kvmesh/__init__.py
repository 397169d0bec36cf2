"""kvmesh's Python client: the kvmesh.v1 API (Client), memfd pools (Pool),
a Mooncake-style store (MooncakeStore), a FastDeploy-style adapter
(FastDeployStorage) and registered KV caches (KVCache). Needs only the
standard library, grpcio and protobuf."""

from .client import Client
from .fastdeploy import FastDeployStorage
from .kvcache import KVCache, Layout, MissingBlockError
from .mooncake import MooncakeStore
from .pool import Pool, register_fd

__all__ = ["Client", "FastDeployStorage", "KVCache", "Layout", "MissingBlockError", "MooncakeStore", "Pool",
           "register_fd"]
