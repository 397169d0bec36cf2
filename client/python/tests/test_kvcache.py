"""Registered KV caches against a real agent: a host memfd cache saved and
loaded by block ids and by token ids, the chain keys agreeing with
docs/keys.md's reference, a missing block named by index, two
tensor-parallel ranks queried for their common prefix, bad input
refused, and a CUDA registration passing its handles through (to an agent
without CUDA)."""

import hashlib
import os
import struct
import unittest

import grpc

from agent import Agent
from kvmesh import Client, KVCache, Layout, MissingBlockError
from kvmesh._proto import kvcache_pb2 as pb
from kvmesh.kvcache import packed_offsets, query_ranks, request_prefix

LAYOUT = Layout(layers=2, blocks=8, heads=2, block_tokens=4, head_dim=8, elem_bytes=2, scale_bytes=4)


def chain(ns, tokens, block_tokens):
    """docs/keys.md's reference implementation."""
    keys, prev = [], b""
    for start in range(0, len(tokens), block_tokens):
        blk = tokens[start:start + block_tokens]
        h = hashlib.sha256(b"kvmesh-chain-v1"
                           + struct.pack("<I", len(ns)) + ns.encode()
                           + struct.pack("<I", len(prev)) + prev
                           + struct.pack("<%di" % len(blk), *blk)).hexdigest().encode()
        prev = h
        keys.append(h if len(blk) == block_tokens else h + b":partial:%d" % len(blk))
    return keys


def block(cache, b):
    """Cache block b: its chunk of every region, in order."""
    l, mem = cache.layout, cache.pool.mem
    offsets, _ = packed_offsets(l)
    chunk = l.heads * l.block_tokens * l.head_dim * l.elem_bytes
    out = b""
    for i, off in enumerate(offsets):
        size = chunk if i < 2 * l.layers else l.scale_bytes
        out += mem[off + b * size:off + (b + 1) * size]
    return out


class KVCaches(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent()

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()

    def setUp(self):
        self.client = Client(self.agent.socket)
        self.client.clear()
        self.cache = KVCache.host(self.client, LAYOUT)
        self.cache.pool.mem[:] = os.urandom(self.cache.pool.size)

    def tearDown(self):
        self.cache.close()
        self.client.close()

    def test_save_load_by_block_ids(self):
        self.assertEqual(self.cache.save([1, 2], ["h1", "h2"]), 2)
        self.assertEqual(self.client.exist(["h1_key_0", "h1_value_0"]), [True, True])
        want = [block(self.cache, 1), block(self.cache, 2)]
        self.assertEqual(self.cache.load(["h2", "h1", "nope"], [6, 5, 7]), (2, 2))
        self.assertEqual(block(self.cache, 6), want[1])
        self.assertEqual(block(self.cache, 5), want[0])
        self.assertEqual(self.cache.load(["h1"], [0]), (1, -1))

    def test_save_load_by_token_ids(self):
        tokens = list(range(100, 110))  # 2 full blocks and a tail of 2
        self.assertEqual(self.cache.save_request(tokens, [0, 1, 2]), 3)
        keys = chain("default", tokens, LAYOUT.block_tokens)
        self.assertTrue(keys[2].endswith(b":partial:2"))
        self.assertEqual(self.client.exist([k + b"_key_0" for k in keys]), [True] * 3)
        want = [block(self.cache, b) for b in (0, 1, 2)]
        self.cache.load_request(tokens, [7, 4, 3])
        self.assertEqual([block(self.cache, b) for b in (7, 4, 3)], want)

        self.client.remove([keys[1] + b"_value_0"])
        with self.assertRaises(MissingBlockError) as cm:
            self.cache.load_request(tokens, [5, 6, 7])
        self.assertEqual(cm.exception.index, 1)

    def test_tensor_parallel_ranks(self):
        """Rank 1 lacks block 3: every rank has 3 leading blocks, and each
        rank loads those 3."""
        rank1 = KVCache.host(self.client, LAYOUT, rank=1)
        try:
            self._two_ranks([self.cache, rank1])
        finally:
            rank1.close()

    def _two_ranks(self, ranks):
        rank1 = ranks[1]
        rank1.pool.mem[:] = os.urandom(rank1.pool.size)
        tokens = list(range(500, 518))  # 4 full blocks and a tail of 2
        for c in ranks:
            self.assertEqual(c.save_request(tokens, [0, 1, 2, 3, 4]), 5)
        self.assertEqual(query_ranks(self.client, tokens, caches=ranks), (5, 5, -1))

        keys = chain("default", tokens, LAYOUT.block_tokens)
        self.client.remove([keys[3] + b"_key_1"])
        self.assertEqual(query_ranks(self.client, tokens, caches=ranks), (3, 5, 1))
        self.assertEqual(query_ranks(self.client, tokens, caches=[c.id for c in reversed(ranks)]).present, 3)
        self.assertEqual(query_ranks(self.client, tokens, tp_size=2, block_tokens=LAYOUT.block_tokens).present, 3)
        self.assertEqual(query_ranks(self.client, tokens, caches=[self.cache]).present, 5)

        n = query_ranks(self.client, tokens, caches=ranks).present
        for c in ranks:
            want = [block(c, b) for b in range(n)]
            c.load_request(tokens, [7, 6, 5, 4, 3], blocks=n)
            self.assertEqual([block(c, b) for b in (7, 6, 5)], want)
        with self.assertRaises(MissingBlockError) as cm:
            rank1.load_request(tokens, [7, 6, 5, 4, 3])
        self.assertEqual(cm.exception.index, 3)
        self.assertEqual(request_prefix(tokens, [7, 6, 5, 4, 3], 5, 4), (tokens, [7, 6, 5, 4, 3]))
        self.assertEqual(request_prefix(tokens, [7, 6, 5, 4, 3], 2, 4), (tokens[:8], [7, 6]))

        with self.assertRaises(grpc.RpcError) as cm:  # no ranks named
            query_ranks(self.client, tokens)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_bad_input(self):
        self.cache.save([0], ["h"])
        for call in (lambda: self.cache.load(["h", "h"], [3, 3]),        # a destination twice
                     lambda: self.cache.load(["h"], [LAYOUT.blocks]),     # outside the cache
                     lambda: self.cache.save([0, 1], ["x"]),              # counts differ
                     lambda: self.cache.save_request(list(range(9)), [0, 1])):  # 9 tokens are 3 blocks
            with self.assertRaises(grpc.RpcError) as cm:
                call()
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(self.cache.load(["h"], [3]), (1, -1))  # still serving

    def test_unregistered(self):
        cache = KVCache.host(self.client, LAYOUT)
        cache.rpc.UnregisterKVCache(pb.UnregisterKVCacheRequest(cache_id=cache.id))
        with self.assertRaises(grpc.RpcError) as cm:
            cache.save([0], ["x"])
        self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)
        cache.close()  # the cache being gone already is no error

    def test_cuda_handles_pass_through(self):
        regions = [(bytes(64), 0)] * (4 * LAYOUT.layers)
        with self.assertRaises(grpc.RpcError) as cm:
            KVCache.cuda(self.client, LAYOUT, device=0, regions=regions)
        # This agent has no CUDA: the handles reached it and could not open.
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        with self.assertRaises(grpc.RpcError) as cm:
            KVCache.cuda(self.client, LAYOUT, device=0, regions=[(bytes(10), 0)] * (4 * LAYOUT.layers))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)


if __name__ == "__main__":
    unittest.main()
