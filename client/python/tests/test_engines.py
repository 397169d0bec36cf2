"""The Mooncake-style store and the FastDeploy-style adapter against a real
agent, with zero-copy pool buffers and with foreign (staged) buffers."""

import ctypes
import mmap
import os
import unittest

from agent import Agent
from kvmesh import FastDeployStorage, MooncakeStore
from kvmesh import client as codes

BLOCK = 64 << 10


def foreign(n, seed=None):
    """Memory the engine allocated itself (not a memfd): (buffer, ptr)."""
    buf = ctypes.create_string_buffer(n)
    if seed is not None:
        ctypes.memmove(buf, os.urandom(n), n)
    return buf, ctypes.addressof(buf)


class Mooncake(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent()

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()

    def setUp(self):
        self.store = MooncakeStore(self.agent.socket, namespace="default")
        self.store.remove_all()

    def tearDown(self):
        self.store.close()

    def test_put_get_exist_remove(self):
        self.assertEqual(self.store.put("a", b"hello"), 0)
        self.assertEqual(self.store.get("a"), b"hello")
        self.assertEqual(self.store.get("missing"), b"")
        self.assertEqual(self.store.is_exist("a"), 1)
        self.assertEqual(self.store.is_exist("missing"), 0)
        self.assertEqual(self.store.batch_is_exist(["a", "missing"]), [1, 0])
        self.assertEqual(self.store.remove("a"), 0)
        self.assertEqual(self.store.is_exist("a"), 0)
        self.assertEqual(self.store.put("", b"x"), codes.INVALID_KEY)
        self.store.put("b", b"1")
        self.store.put("c", b"2")
        self.assertEqual(self.store.remove_all(), 2)

    def test_zero_copy_pool_buffers(self):
        ptr, pool = self.store.allocate_buffer(4 * BLOCK)
        self.assertEqual(self.store.register_buffer(ptr, 4 * BLOCK), 0)
        data = os.urandom(2 * BLOCK)
        pool.mem[0:2 * BLOCK] = data
        keys = ["z0", "z1"]
        self.assertEqual(self.store.batch_put_from(keys, [ptr, ptr + BLOCK], [BLOCK, BLOCK]), [0, 0])
        got = self.store.batch_get_into(keys + ["nope"], [ptr + 3 * BLOCK, ptr + 2 * BLOCK, ptr],
                                        [BLOCK, BLOCK, BLOCK])
        self.assertEqual(got, [BLOCK, BLOCK, codes.NOT_FOUND])
        self.assertEqual(pool.mem[3 * BLOCK:4 * BLOCK], data[:BLOCK])
        self.assertEqual(pool.mem[2 * BLOCK:3 * BLOCK], data[BLOCK:])
        # Nothing went through the staging pool.
        self.assertIsNone(self.store.mover._staging)

    def test_foreign_buffers_staged(self):
        src, sptr = foreign(3 * BLOCK, seed=True)
        dst, dptr = foreign(4 * BLOCK)
        self.assertEqual(self.store.register_buffer(sptr, 3 * BLOCK), 0)
        keys = ["f0", "f1", "f2"]
        self.assertEqual(self.store.batch_put_from(keys, [sptr, sptr + BLOCK, sptr + 2 * BLOCK], [BLOCK] * 3), [0, 0, 0])
        # f2 into a buffer larger than the value: bytes read is the value's size.
        got = self.store.batch_get_into(keys, [dptr + BLOCK, dptr, dptr + 2 * BLOCK], [BLOCK, BLOCK, 2 * BLOCK])
        self.assertEqual(got, [BLOCK, BLOCK, BLOCK])
        self.assertEqual(dst.raw[BLOCK:2 * BLOCK], src.raw[:BLOCK])
        self.assertEqual(dst.raw[:BLOCK], src.raw[BLOCK:2 * BLOCK])
        self.assertEqual(dst.raw[2 * BLOCK:3 * BLOCK], src.raw[2 * BLOCK:])
        self.assertEqual(self.store.batch_get_into(["f0"], [dptr], [BLOCK - 1]), [codes.BUFFER_SIZE])

    def test_foreign_memfd_adopted_or_staged(self):
        fd = os.memfd_create("engine-owned")
        os.ftruncate(fd, 2 * BLOCK)
        m = mmap.mmap(fd, 2 * BLOCK)
        os.close(fd)
        anchor = ctypes.c_char.from_buffer(m)
        ptr = ctypes.addressof(anchor)
        m[0:BLOCK] = os.urandom(BLOCK)
        self.store.register_buffer(ptr, 2 * BLOCK)
        self.assertEqual(self.store.batch_put_from(["m0"], [ptr], [BLOCK]), [0])
        self.assertEqual(self.store.batch_get_into(["m0"], [ptr + BLOCK], [BLOCK]), [BLOCK])
        self.assertEqual(m[BLOCK:], m[:BLOCK])
        # Zero-copy where /proc/self/map_files can be opened (privileged),
        # staged otherwise; the bytes are right either way.
        adopted = self.store.mover.locate(ptr, BLOCK) is not None
        self.assertEqual(adopted, self.store.mover._staging is None)
        self.store.close()
        del anchor
        m.close()

    def test_staging_in_chunks(self):
        self.store.mover._staging_bytes = BLOCK  # forces one chunk per key
        src, sptr = foreign(4 * BLOCK, seed=True)
        dst, dptr = foreign(4 * BLOCK)
        keys = ["c%d" % i for i in range(4)]
        ptrs = [sptr + i * BLOCK for i in range(4)]
        self.assertEqual(self.store.batch_put_from(keys, ptrs, [BLOCK] * 4), [0] * 4)
        self.assertEqual(self.store.batch_get_into(keys, [dptr + i * BLOCK for i in range(4)], [BLOCK] * 4), [BLOCK] * 4)
        self.assertEqual(dst.raw, src.raw)


class FastDeploy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent("--namespaces", "default,model-a")

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()

    def setUp(self):
        self.fd = FastDeployStorage(self.agent.socket, namespace="model-a")
        self.fd.clear()

    def tearDown(self):
        self.fd.close()

    def test_set_get_exists_query_clear(self):
        src, sptr = foreign(3 * BLOCK, seed=True)
        dst, dptr = foreign(3 * BLOCK)
        self.assertTrue(self.fd.register_buffer(sptr, 3 * BLOCK) in (True, False))
        keys = ["h0", "h1", "h2"]
        self.assertEqual(self.fd.batch_set(keys, [sptr + i * BLOCK for i in range(3)], [BLOCK] * 3), [BLOCK] * 3)
        got = self.fd.batch_get(keys + ["gone"], [dptr + i * BLOCK for i in range(3)] + [dptr], [BLOCK] * 4)
        self.assertEqual(got, [BLOCK] * 3 + [codes.NOT_FOUND])
        self.assertEqual(dst.raw, src.raw)
        self.assertEqual(self.fd.exists(["h0", "x", "h2"]), [True, False, True])
        self.assertEqual(self.fd.query(["h0", "h1", "x", "h2"]), 2)
        self.assertEqual(self.fd.clear(), 3)
        self.assertEqual(self.fd.query(keys), 0)

    def test_zero_copy_and_namespaces(self):
        ptr, pool = self.fd.mover.allocate(2 * BLOCK)
        pool.mem[:BLOCK] = os.urandom(BLOCK)
        self.assertEqual(self.fd.batch_set(["k"], [ptr], [BLOCK]), [BLOCK])
        other = FastDeployStorage(self.agent.socket, namespace="default")
        try:
            self.assertEqual(other.exists(["k"]), [False])  # namespaces are apart
        finally:
            other.close()
        self.assertEqual(self.fd.batch_get(["k"], [ptr + BLOCK], [BLOCK]), [BLOCK])
        self.assertEqual(pool.mem[BLOCK:], pool.mem[:BLOCK])
        self.assertIsNone(self.fd.mover._staging)
        bad = FastDeployStorage(self.agent.socket, namespace="unconfigured")
        try:
            self.assertEqual(bad.batch_set(["k"], [ptr], [BLOCK]), [codes.UNKNOWN_NAMESPACE])
        finally:
            bad.close()


if __name__ == "__main__":
    unittest.main()
