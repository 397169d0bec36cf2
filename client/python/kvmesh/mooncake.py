"""A store object with Mooncake's MooncakeDistributedStore interface, over a
kvmesh agent, so engines written against Mooncake can switch by import."""

from .buffers import Mover
from .client import Client


class MooncakeStore:
    """Per-key results follow Mooncake: 0 (or bytes read, for
    batch_get_into) on success, a negative code (kvmesh.client) on failure."""

    def __init__(self, socket, mempool_socket=None, namespace="default"):
        self.client = Client(socket, mempool_socket, namespace)
        self.mover = Mover(self.client)

    def close(self):
        self.mover.close()
        self.client.close()

    def allocate_buffer(self, size):
        """A zero-copy buffer: (ptr, pool); ptr is valid until close()."""
        return self.mover.allocate(size)

    def register_buffer(self, ptr, size):
        """Declares memory that batch_put_from / batch_get_into will use.
        Always 0: memfd-backed memory becomes zero-copy, other memory works
        through one staging copy."""
        self.mover.register(ptr, size)
        return 0

    def put(self, key, value):
        r = self.client.put(key, value)
        return 0 if r >= 0 else r

    def get(self, key):
        """The value, or b"" on a miss or error (as Mooncake does)."""
        v, _ = self.client.get(key)
        return v if v is not None else b""

    def batch_put_from(self, keys, ptrs, sizes):
        return [0 if r >= 0 else r for r in self.mover.put(keys, ptrs, sizes)]

    def batch_get_into(self, keys, ptrs, sizes):
        """Per key: bytes read (the value's size, at most the buffer's) or a
        negative code."""
        return self.mover.get(keys, ptrs, sizes)

    def is_exist(self, key):
        """1 present, 0 absent, negative on error."""
        return self.batch_is_exist([key])[0]

    def batch_is_exist(self, keys):
        try:
            return [1 if e else 0 for e in self.client.exist(keys)]
        except Exception:  # a whole-request failure is every key's
            return [-1] * len(keys)

    def remove(self, key):
        r = self.client.remove([key])[0]
        return 0 if r >= 0 else r

    def remove_all(self):
        """The number of blocks removed."""
        return self.client.clear()
