"""A storage adapter with the semantics of FastDeploy's KVCacheStorage
backends, over a kvmesh agent."""

from .buffers import Mover
from .client import Client


class FastDeployStorage:
    """batch_set / batch_get take keys with pointers and sizes of host
    buffers and return, per key, bytes moved (> 0) or a negative code."""

    def __init__(self, socket, mempool_socket=None, namespace="default"):
        self.client = Client(socket, mempool_socket, namespace)
        self.mover = Mover(self.client)

    def close(self):
        self.mover.close()
        self.client.close()

    def register_buffer(self, ptr, size):
        """Declares the host KV buffer; memfd-backed memory goes zero-copy."""
        return self.mover.register(ptr, size)

    def batch_set(self, keys, target_locations, target_sizes):
        return self.mover.put(keys, target_locations, target_sizes)

    def batch_get(self, keys, target_locations, target_sizes):
        return self.mover.get(keys, target_locations, target_sizes)

    def exists(self, keys):
        """Per key, whether it is stored."""
        return self.client.exist(keys)

    def query(self, keys):
        """The number of leading keys stored (the reusable prefix)."""
        return self.client.query(keys)

    def clear(self):
        """Removes every block of the namespace; returns how many."""
        return self.client.clear()
