"""kvmesh's Python client: the kvmesh.v1 API (Client), memfd pools (Pool),
a Mooncake-style store (MooncakeStore) and a FastDeploy-style adapter
(FastDeployStorage). Needs only the standard library, grpcio and protobuf."""

from .client import Client
from .fastdeploy import FastDeployStorage
from .mooncake import MooncakeStore
from .pool import Pool, register_fd

__all__ = ["Client", "FastDeployStorage", "MooncakeStore", "Pool", "register_fd"]
