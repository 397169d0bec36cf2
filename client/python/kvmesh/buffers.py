"""Moves blocks between the store and engine memory given as raw pointers.

Pointers inside one of the client's own memfd pools, or inside a memfd the
process registered with register(), go zero-copy (the agent copies straight
into or out of the pool). Any other memory (pinned buffers the engine
allocated itself) goes through a staging memfd with one ctypes.memmove on
this side.
"""

import ctypes
import threading

from .pool import AdoptedPool

STAGING_BYTES = 64 << 20


class Mover:
    def __init__(self, client, staging_bytes=STAGING_BYTES):
        self.client = client
        self.pools = []  # the client's own, zero-copy
        self._staging = None
        self._staging_bytes = staging_bytes
        self._lock = threading.Lock()  # one user of the staging pool at a time

    def allocate(self, size, name="kvmesh-buffer"):
        """A new zero-copy buffer: (ptr, pool). Engines that can place their
        host KV pool here skip the client-side copy entirely."""
        pool = self.client.new_pool(size, name)
        self.pools.append(pool)
        return pool.addr, pool

    def register(self, ptr, size):
        """Makes [ptr, ptr+size) zero-copy if it lies in a shared memfd
        mapping; returns whether it does. Other memory still works, staged."""
        if self.locate(ptr, size):
            return True
        p = AdoptedPool.adopt(self.client.mempool_socket, ptr, size)
        if p is not None:
            self.pools.append(p)
        return p is not None

    def locate(self, ptr, size):
        """(pool_id, offset) if [ptr, ptr+size) is in a registered pool."""
        for p in self.pools:
            if p.contains(ptr, size):
                return p.id, p.offset(ptr)
        return None

    def _staging_pool(self, need):
        if self._staging is None or self._staging.size < need:
            if self._staging is not None:
                self._staging.close()
            self._staging = self.client.new_pool(max(need, self._staging_bytes), "kvmesh-staging")
        return self._staging

    def _run(self, keys, ptrs, sizes, op, put):
        """op(items) over every key; foreign pointers staged in chunks that
        fit the staging pool. Returns op's per-key results in key order."""
        out = [None] * len(keys)
        direct, foreign = [], []
        for i, (k, p, n) in enumerate(zip(keys, ptrs, sizes)):
            loc = self.locate(p, n)
            (direct if loc else foreign).append((i, loc))
        if direct:
            items = [(keys[i], pid, [(off, sizes[i])]) for i, (pid, off) in direct]
            for (i, _), r in zip(direct, op(items)):
                out[i] = r
        if foreign:
            with self._lock:
                stage = self._staging_pool(max(sizes[i] for i, _ in foreign))
                chunk, used = [], 0
                for i, _ in foreign + [(None, None)]:
                    if i is None or used + sizes[i] > stage.size:
                        self._staged(stage, chunk, keys, ptrs, sizes, op, put, out)
                        chunk, used = [], 0
                    if i is not None:
                        chunk.append((i, used))
                        used += sizes[i]
        return out

    @staticmethod
    def _staged(stage, chunk, keys, ptrs, sizes, op, put, out):
        if not chunk:
            return
        if put:
            for i, off in chunk:
                ctypes.memmove(stage.addr + off, ptrs[i], sizes[i])
        rs = op([(keys[i], stage.id, [(off, sizes[i])]) for i, off in chunk])
        for (i, off), r in zip(chunk, rs):
            if not put and r > 0:
                ctypes.memmove(ptrs[i], stage.addr + off, r)
            out[i] = r

    def put(self, keys, ptrs, sizes):
        return self._run(keys, ptrs, sizes, self.client.pool_batch_put, True)

    def get(self, keys, ptrs, sizes):
        return self._run(keys, ptrs, sizes, self.client.pool_batch_get, False)

    def close(self):
        for p in self.pools:
            p.close()
        self.pools = []
        if self._staging is not None:
            self._staging.close()
            self._staging = None
