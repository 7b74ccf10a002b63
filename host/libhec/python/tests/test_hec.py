"""Tests of the hec package against running agents.

HEC_TEST_TARGETS names three agents that are peers of one another (node
ids 1, 2, 3), comma-separated; host/libhec's Go test starts them and runs
this file. HEC_LIB names libhec.so.
"""

import array
import os
import signal
import subprocess
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hec  # noqa: E402


def crc32c(data):
    table = crc32c.table
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


crc32c.table = _table()
TARGETS = [t for t in os.environ.get("HEC_TEST_TARGETS", "").split(",") if t]


def pattern(n, seed):
    return bytes((i * 31 + seed * 7 + (i >> 9)) & 0xFF for i in range(n))


@unittest.skipUnless(TARGETS, "HEC_TEST_TARGETS names no agents (host/libhec's Go test starts them)")
class ClientTest(unittest.TestCase):
    def setUp(self):
        self.c = hec.Client(TARGETS[0], timeout=20)

    def tearDown(self):
        self.c.close()

    def test_ping_and_checksum(self):
        self.c.ping()
        data = pattern(100000, 1)
        self.assertEqual(self.c.checksum(data), crc32c(data))
        self.assertEqual(self.c.checksum(bytearray(data)), crc32c(data))
        self.assertEqual(self.c.checksum(memoryview(data)[10:]), crc32c(data[10:]))

    def test_zero_copy_buffer(self):
        with self.c.alloc(1 << 16) as buf:
            self.assertIsInstance(buf.view, memoryview)
            self.assertFalse(buf.view.readonly)
            data = pattern(1 << 16, 2)
            buf.view[:] = data
            self.assertEqual(self.c.checksum(buf), crc32c(data))
            # A typed view of the same bytes, as NumPy would make.
            floats = buf.view.cast("f")
            floats[0] = 1.5
            self.assertEqual(bytes(buf.view[:4]), array.array("f", [1.5]).tobytes())
        with self.assertRaises(hec.InvalidArgument):
            self.c.checksum(buf)  # freed

    def test_kv(self):
        self.c.kv_put(b"py:k", b"value from python")
        self.assertEqual(self.c.kv_get(b"py:k"), b"value from python")
        big = pattern(50000, 3)
        self.c.kv_put(b"py:big", big)
        self.assertEqual(self.c.kv_get(b"py:big"), big)
        with self.c.alloc(1 << 16) as buf:
            n = self.c.kv_get(b"py:big", into=buf)
            self.assertEqual(bytes(buf.view[:n]), big)
        with self.assertRaises(hec.TooSmall) as too_small:
            self.c.kv_get(b"py:big", into=bytearray(100))
        self.assertEqual(too_small.exception.needed, len(big))
        self.assertTrue(self.c.kv_delete(b"py:k"))
        self.assertFalse(self.c.kv_delete(b"py:k"))
        with self.assertRaises(hec.NotFound):
            self.c.kv_get(b"py:k")
        with self.assertRaises(KeyError):
            self.c.kv_get(b"py:k")

    def test_bad_arguments(self):
        with self.assertRaises(hec.InvalidArgument):
            self.c.kv_put(b"", b"v")
        with self.assertRaises(hec.TooSmall):
            self.c.alloc(self.c.window_size + 1)
        with self.assertRaises(hec.InvalidArgument):
            self.c.ec_encode(2, 1, [bytearray(64), bytearray(64), bytearray(128)])
        with self.assertRaises(hec.Unreachable):
            hec.Client("/nonexistent/region", timeout=0.5)
        other = hec.Client(TARGETS[0])
        other.close()
        with self.assertRaises(hec.Closed):
            other.ping()
        lib = hec.library()
        self.assertEqual(lib.hec_ping(None), hec.EBADHANDLE)
        self.assertEqual(lib.hec_ping(0x4242), hec.EBADHANDLE)

    def test_ec(self):
        k, m, w = 4, 2, 64 * 100
        shards = [bytearray(pattern(w, i)) for i in range(k)] + [bytearray(w) for _ in range(m)]
        self.c.ec_encode(k, m, shards, rails=hec.RAILS_DPU)
        want = [bytes(s) for s in shards]
        shards[0][:] = bytes(w)
        shards[5][:] = bytes(w)
        self.c.ec_reconstruct(k, m, shards, [False, True, True, True, True, False], rails=hec.RAILS_HOST)
        self.assertEqual([bytes(s) for s in shards], want)

    def test_objects(self):
        data = pattern(300000, 4)
        self.c.object_put("py/object", data, k=2, m=1)
        with hec.Client(TARGETS[1]) as other:
            self.assertEqual(other.object_get("py/object", k=2, m=1), data)
        self.c.object_delete("py/object", k=2, m=1)
        with self.assertRaises(hec.NotFound):
            self.c.object_get("py/object", k=2, m=1)

    def test_allreduce(self):
        clients = [self.c] + [hec.Client(t) for t in TARGETS[1:3]]
        try:
            comms = [c.coll_join(0xB0B, [1, 2, 3]) for c in clients]
            self.assertEqual([g.rank for g in comms], [0, 1, 2])
            n = 10007
            sends = [array.array("f", [float((i + r) % 5) for i in range(n)]) for r in range(3)]
            recvs = [array.array("f", bytes(4 * n)) for _ in range(3)]
            ops = [g.allreduce_async(s, r) for g, s, r in zip(comms, sends, recvs)]
            for op in ops:
                op.wait(20)
            want = [float(i % 5 + (i + 1) % 5 + (i + 2) % 5) for i in range(n)]
            for r in recvs:
                self.assertEqual(list(r), want)
            for g in comms:
                g.leave()
        finally:
            for c in clients[1:]:
                c.close()

    def test_collectives_in_flight(self):
        """DDP's pattern: buckets of odd sizes (not from alloc) in flight at
        once on one communicator, then every other collective, async."""
        clients = [self.c] + [hec.Client(t) for t in TARGETS[1:3]]
        try:
            comms = [c.coll_join(0xB0C, [1, 2, 3]) for c in clients]
            sizes = [4198400 // 4, 1, 1000003, 65536, 33628200 // 16, 7, 250000, 3]
            sends = [[array.array("f", [float((i + r + j) % 5) for i in range(n)]) for j, n in enumerate(sizes)]
                     for r in range(3)]
            recvs = [[array.array("f", bytes(4 * n)) for n in sizes] for _ in range(3)]
            ops = [[g.allreduce_async(s, r) for s, r in zip(sends[k], recvs[k])] for k, g in enumerate(comms)]
            for k in range(3):
                for op in ops[k]:
                    op.wait(60)
            for j, n in enumerate(sizes):
                want = [float(sum((i + r + j) % 5 for r in range(3))) for i in range(min(n, 1000))]
                for k in range(3):
                    self.assertEqual(list(recvs[k][j][:1000]), want, "bucket %d (%d floats), rank %d" % (j, n, k))
            # Every other kind, started async in one order on every rank.
            n = 3001
            gath = [bytearray(3 * n) for _ in range(3)]
            bcast = [bytearray(pattern(n, 9)) if k == 1 else bytearray(n) for k in range(3)]
            a2a_in = [bytes([k * 16 + b for b in range(3) for _ in range(n)]) for k in range(3)]
            a2a_out = [bytearray(3 * n) for _ in range(3)]
            rs_in = [array.array("i", [k + i for i in range(3 * n)]) for k in range(3)]
            rs_out = [array.array("i", bytes(4 * n)) for _ in range(3)]
            ops = []
            for k, g in enumerate(comms):
                ops.append([
                    g.run_async(hec.ALLGATHER, pattern(n, k), gath[k], hec.UINT8),
                    g.run_async(hec.BROADCAST, bcast[k], bcast[k], hec.UINT8, root=1),
                    g.run_async(hec.ALLTOALL, a2a_in[k], a2a_out[k], hec.UINT8),
                    g.run_async(hec.REDUCESCATTER, rs_in[k], rs_out[k], hec.INT32, hec.SUM),
                    g.run_async(hec.BARRIER, None, None),
                ])
            for k in range(3):
                for op in ops[k]:
                    op.wait(60)
            for k in range(3):
                self.assertEqual(bytes(gath[k]), pattern(n, 0) + pattern(n, 1) + pattern(n, 2))
                self.assertEqual(bytes(bcast[k]), pattern(n, 9))
                self.assertEqual(bytes(a2a_out[k]), bytes([j * 16 + k for j in range(3) for _ in range(n)]))
                self.assertEqual(list(rs_out[k][:5]), [3 * (k * n + i) + 3 for i in range(5)])
            for g in comms:
                g.leave()
        finally:
            for c in clients[1:]:
                c.close()

    def test_torch_absent(self):
        """Without torch, hec.torch says so in its ImportError."""
        try:
            import torch  # noqa: F401
        except ImportError:
            with self.assertRaisesRegex(ImportError, "PyTorch"):
                import hec.torch  # noqa: F401
        else:
            import hec.torch  # noqa: F401 - with torch it imports (TestTorch runs it)

    def test_threads(self):
        errors = []

        def work(i):
            try:
                data = pattern(4096, i)
                for j in range(100):
                    self.c.ping()
                    self.assertEqual(self.c.checksum(data), crc32c(data))
                    self.c.kv_put(b"py:t%d" % i, b"%d" % j)
                    self.assertEqual(self.c.kv_get(b"py:t%d" % i), b"%d" % j)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])

    def test_async_batch(self):
        with self.c.alloc(32 * 65536) as buf:
            buf.view[:] = pattern(32 * 65536, 5)
            ops = [self.c.checksum_async(buf.view[i * 65536:(i + 1) * 65536]) for i in range(32)]
            for i, op in enumerate(ops):
                self.assertEqual(op.wait(20), crc32c(bytes(buf.view[i * 65536:(i + 1) * 65536])))

    def test_killed_mid_batch(self):
        child = (
            "import os, signal, sys; sys.path.insert(0, %r); import hec\n"
            "c = hec.Client(%r)\n"
            "b = c.alloc(8 << 20)\n"
            "ops = [c.checksum_async(b) for _ in range(64)]\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n"
        ) % (os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."), TARGETS[0])
        for _ in range(2):
            p = subprocess.run([sys.executable, "-c", child], timeout=60)
            self.assertEqual(p.returncode, -signal.SIGKILL)
            self.c.ping()
            with hec.Client(TARGETS[0], timeout=20) as again:
                again.ping()


if __name__ == "__main__":
    unittest.main(verbosity=2)
