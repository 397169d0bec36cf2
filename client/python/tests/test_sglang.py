"""SGLang HiCache's `rpc` protocol end to end, as SGLang itself speaks it:
a memfd registered on the mempool socket, StorageServer over gRPC."""

import mmap
import os
import socket
import struct
import time
import unittest

import grpc

from agent import Agent
from kvmesh import register_fd
from kvmesh._proto import hicache_pb2 as pb
from kvmesh._proto.rpc import Stub

OK, INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, OUT_OF_RANGE = 0, 3, 5, 9, 11
POOL = 1 << 20


def xfer(key, pool_id, *iovs):
    return pb.Transfer(id=key, pool_id=pool_id, iovec=[pb.Iovec(offset=o, length=n) for o, n in iovs])


class SGLangProtocol(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent()
        cls.channel = grpc.insecure_channel("unix://" + cls.agent.socket)
        cls.rpc = Stub(cls.channel, pb, "StorageServer")
        cls.fd = os.memfd_create("sglang-host")
        os.ftruncate(cls.fd, POOL)
        cls.mem = mmap.mmap(cls.fd, POOL)
        cls.pool_id, cls.conn = register_fd("unix://" + cls.agent.mempool_socket, "sglang-host", cls.fd)

    @classmethod
    def tearDownClass(cls):
        cls.conn.close()
        cls.channel.close()
        cls.mem.close()
        os.close(cls.fd)
        cls.agent.stop()

    def test_put_exist_get(self):
        self.assertGreater(self.pool_id, 0)
        self.mem[0:8192] = os.urandom(8192)
        r = self.rpc.BatchPut(pb.BatchPutRequest(puts=[
            xfer(b"page-0", self.pool_id, (0, 1000), (4096, 96), (2000, 1000)),
            xfer(b"page-1", self.pool_id, (6000, 2000)),
        ]))
        self.assertEqual(list(r.results), [OK, OK])
        r = self.rpc.Exist(pb.ExistRequest(id=[b"page-0", b"missing", b"page-1", b"also-missing"]))
        self.assertEqual(list(r.results), [True, False, True, False])
        want0 = self.mem[0:1000] + self.mem[4096:4192] + self.mem[2000:3000]
        want1 = self.mem[6000:8000]
        r = self.rpc.BatchGet(pb.BatchGetRequest(gets=[
            xfer(b"page-0", self.pool_id, (500000, 2000), (300000, 96)),
            xfer(b"page-1", self.pool_id, (700000, 2000)),
        ]))
        self.assertEqual(list(r.results), [OK, OK])
        self.assertEqual(self.mem[500000:502000] + self.mem[300000:300096], want0)
        self.assertEqual(self.mem[700000:702000], want1)

    def test_errors(self):
        r = self.rpc.BatchPut(pb.BatchPutRequest(puts=[xfer(b"stored", self.pool_id, (0, 4096))]))
        self.assertEqual(list(r.results), [OK])
        cases = [
            ("unknown key", xfer(b"absent", self.pool_id, (0, 4096)), NOT_FOUND),
            ("length mismatch", xfer(b"stored", self.pool_id, (0, 4000)), INVALID_ARGUMENT),
            ("no iovec", xfer(b"stored", self.pool_id), INVALID_ARGUMENT),
            ("pool 0", xfer(b"stored", 0, (0, 4096)), INVALID_ARGUMENT),
            ("unknown pool", xfer(b"stored", 9999, (0, 4096)), FAILED_PRECONDITION),
            ("past the pool", xfer(b"stored", self.pool_id, (POOL - 4095, 4096)), OUT_OF_RANGE),
            ("offset near 2^64", xfer(b"stored", self.pool_id, (2**64 - 100, 4096)), OUT_OF_RANGE),
        ]
        for name, t, want in cases:
            with self.subTest(name):
                r = self.rpc.BatchGet(pb.BatchGetRequest(gets=[t]))
                self.assertEqual(list(r.results), [want])
        r = self.rpc.BatchPut(pb.BatchPutRequest(puts=[
            xfer(b"p1", self.pool_id, (2**64 - 1, 1)),
            xfer(b"p2", 9999, (0, 1)),
            xfer(b"p3", 0, (0, 1)),
            xfer(b"p4", self.pool_id),
        ]))
        self.assertEqual(list(r.results), [OUT_OF_RANGE, FAILED_PRECONDITION, INVALID_ARGUMENT, INVALID_ARGUMENT])

    def test_closed_pool_fails_per_item(self):
        fd = os.memfd_create("short-lived")
        os.ftruncate(fd, 4096)
        pool_id, conn = register_fd(self.agent.mempool_socket, "short-lived", fd)
        os.close(fd)
        self.assertNotEqual(pool_id, self.pool_id)
        r = self.rpc.BatchPut(pb.BatchPutRequest(puts=[xfer(b"short", pool_id, (0, 10))]))
        self.assertEqual(list(r.results), [OK])
        conn.close()
        deadline = time.time() + 5
        while True:  # the agent unregisters when it sees the close
            r = self.rpc.BatchGet(pb.BatchGetRequest(gets=[xfer(b"short", pool_id, (0, 10))]))
            if r.results[0] == FAILED_PRECONDITION or time.time() > deadline:
                break
            time.sleep(0.01)
        self.assertEqual(list(r.results), [FAILED_PRECONDITION])

    def test_malformed_registration_closes(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.agent.mempool_socket)
        s.sendall(struct.pack("<QI", 0x12345678, 4) + b"pool")  # bad magic, and no fd
        s.settimeout(5)
        self.assertEqual(s.recv(4), b"")
        s.close()
        self.assertIn("malformed registration", self.agent.logs())


if __name__ == "__main__":
    unittest.main()
