"""Zero copies on the same host: sgemm_client's shared-memory regions against
the real sgemm-server's Unix socket. Arrays from empty() and register() are
named in place (no matrix byte through gRPC, C written by the server into a
region array, views with a leading dimension), ordinary arrays go through one
scratch region the client keeps, regions are reused across calls, and another
client's regions cannot be used. Results against a float64 numpy reference on
odd shapes."""

import json
import os
import time
import unittest
from multiprocessing import shared_memory

import grpc
import numpy as np

import sgemm_client
from checks import TOLERANCE, max_error, random
from sgemm_client import pb2
from server_process import ServerProcess


class Regions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu-threads", "1", unix=True)
        cls.client = sgemm_client.Client(cls.server.unix_target)
        cls.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        assert cls.server.stop() == 0, cls.server.log()

    def test_arrays_in_regions_travel_by_name(self):
        cl = self.client
        self.assertEqual(cl.transport(), "shm")
        self.assertTrue(cl.info().regions_available)
        m, n, k = 203, 77, 151
        x, y, z = cl.empty((m, k)), cl.empty((k, n)), cl.empty((m, n))
        self.assertEqual((x.shape, x.dtype), ((m, k), np.float32))
        self.assertTrue(np.all(z == 0))
        x[...], y[...] = random(self.rng, m, k), random(self.rng, k, n)
        registered = len(cl.regions().regions)
        for _ in range(3):  # the same regions, call after call
            got, summary = cl.multiply(x, y, out=z, timeout=60)
            self.assertIs(got, z)
            self.assertLessEqual(max_error(z, x, y), TOLERANCE)
            self.assertEqual((summary.transport, summary.bytes_sent, summary.bytes_received), ("shm", 0, 0))
            self.assertEqual(summary.proto.bytes_received, 0)  # the server's count: no matrix byte on gRPC
            self.assertEqual(summary.rpc, "unary")  # the header alone in one message, the summary back
        self.assertEqual(len(cl.regions().regions), registered)
        # C in place: C = 2 A B - 0.5 C.
        c0 = z.copy()
        cl.multiply(x, y, z, 2.0, -0.5, out=z, timeout=60)
        self.assertLessEqual(max_error(z, x, y, c0, 2.0, -0.5), TOLERANCE)
        # Without out, C comes back through gRPC.
        c, summary = cl.multiply(x, y, timeout=60)
        self.assertEqual((summary.transport, summary.bytes_sent, summary.bytes_received), ("shm", 0, m * n * 4))
        self.assertEqual(summary.rpc, "unary")  # C fits one answer
        self.assertLessEqual(max_error(c, x, y), TOLERANCE)
        # A C too large for one answer takes the stream, its chunks as they are computed.
        wide_m, wide_n = 1100, 1000
        p, q = cl.empty((wide_m, 3)), cl.empty((3, wide_n))
        p[...], q[...] = random(self.rng, wide_m, 3), random(self.rng, 3, wide_n)
        c, summary = cl.multiply(p, q, timeout=60)
        self.assertEqual((summary.transport, summary.rpc), ("shm", "stream"))
        self.assertEqual(summary.bytes_received, wide_m * wide_n * 4)
        self.assertLessEqual(max_error(c, p, q), TOLERANCE)

    def _threads_through_scratch(self, cl, rpc):
        """6 threads of ordinary arrays through `cl`'s scratch region at once; the failures."""
        import threading
        errors = []

        def worker(seed):
            rng = np.random.default_rng(seed)
            for i in range(20):
                u, v = random(rng, 3 + i % 10, 11), random(rng, 11, 7 + seed % 5)
                got, summ = cl.multiply(u, v, timeout=60)
                if summ.rpc != rpc or max_error(got, u, v) > TOLERANCE:
                    errors.append((seed, i, summ.rpc))

        threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return errors

    def test_threads_share_the_scratch_region_safely(self):
        # C is copied out of the scratch region before the region goes back for another thread's call.
        with sgemm_client.Client(self.server.unix_target) as cl:
            self.assertEqual(self._threads_through_scratch(cl, "unary"), [])

    def test_a_request_ring_carries_what_auto_sends_as_one_message(self):
        # rpc "ring": MultiplyUnary's bytes through a ring in shared memory, no gRPC call per product
        # (docs/transport.md, "Request rings"); odd shapes, ops, C, regions, ordinary arrays, threads.
        with sgemm_client.Client(self.server.unix_target, rpc="ring") as cl:
            m, n, k = 37, 19, 53
            x, y, z = cl.empty((m, k)), cl.empty((k, n)), cl.empty((m, n))
            x[...], y[...] = random(self.rng, m, k), random(self.rng, k, n)
            got, summary = cl.multiply(x, y, out=z, timeout=60)  # operands and C in regions
            self.assertEqual((summary.transport, summary.rpc, summary.bytes_sent), ("shm", "ring", 0))
            self.assertLessEqual(max_error(z, x, y), TOLERANCE)
            a, b, c0 = random(self.rng, k, m), random(self.rng, n, k), random(self.rng, m, n)
            c, summary = cl.multiply(a, b, c0, 1.5, -0.5, op_a="t", op_b="t", timeout=60)  # the scratch region
            self.assertEqual(summary.rpc, "ring")
            self.assertLessEqual(max_error(c, a.T, b.T, c0, 1.5, -0.5), TOLERANCE)
            self.assertEqual(self._threads_through_scratch(cl, "ring"), [])
            ring_region = cl._ring.region.name
            self.assertIn(ring_region, [r.name for r in cl.regions().regions])
        # Closed with the client: the server let go of the ring's region.
        self.assertNotIn(ring_region, [r.name for r in self.client.regions().regions])
        # Over the operands in the message, on the same socket.
        with sgemm_client.Client(self.server.unix_target, rpc="ring", transport="grpc") as cl:
            a, b = random(self.rng, 64, 64), random(self.rng, 64, 64)
            c, summary = cl.multiply(a, b, timeout=60)
            self.assertEqual((summary.transport, summary.rpc), ("grpc", "ring"))
            self.assertLessEqual(max_error(c, a, b), TOLERANCE)
            # A C larger than a slot's 1 MiB still fits MultiplyUnary: it goes that way.
            p, q = random(self.rng, 600, 5), random(self.rng, 5, 600)
            c, summary = cl.multiply(p, q, timeout=60)
            self.assertEqual(summary.rpc, "unary")
            self.assertLessEqual(max_error(c, p, q), TOLERANCE)
        # Only on the Unix socket; the asyncio client takes no ring.
        with sgemm_client.Client(self.server.address, rpc="ring") as cl:
            with self.assertRaises(sgemm_client.SgemmError) as e:
                cl.multiply(random(self.rng, 2, 2), random(self.rng, 2, 2), timeout=60)
            self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        with self.assertRaises(ValueError):
            sgemm_client.aio.Client(self.server.unix_target, rpc="ring")

    def test_views_of_a_region_with_a_leading_dimension(self):
        cl = self.client
        big = cl.empty((300, 200))
        big[...] = random(self.rng, 300, 200)
        out = cl.empty((128, 64))
        a, b = big[3:130, 5:98], big[150:243, 11:69]  # 127 x 93 and 93 x 58, rows 200 floats apart
        target = out[1:128, 2:60]
        _, summary = cl.multiply(a, b, out=target, timeout=60)
        self.assertEqual(summary.transport, "shm")
        self.assertEqual(summary.proto.bytes_received, 0)
        self.assertLessEqual(max_error(target, a, b), TOLERANCE)
        self.assertTrue(np.all(out[0] == 0) and np.all(out[:, :2] == 0) and np.all(out[:, 60:] == 0))
        # A transposed view is the row-major block under it with op_a = "t": named in place, no copy.
        got, summary = cl.multiply(big[:93, :127].T, b, timeout=60)
        self.assertEqual(summary.transport, "shm")
        self.assertEqual(summary.proto.bytes_received, 0)  # the server received no matrix byte
        self.assertIn("op_a = t", summary.proto.plan_reason)
        self.assertLessEqual(max_error(got, big[:93, :127].T, b), TOLERANCE)
        # Stored transposed and said so: the same product.
        got, summary = cl.multiply(big[:93, :127], b, op_a="t", timeout=60)
        self.assertEqual(summary.transport, "shm")
        self.assertLessEqual(max_error(got, big[:93, :127].T, b), TOLERANCE)

    def test_ordinary_arrays_through_the_kept_scratch_region(self):
        before = {r.name for r in self.client.regions().regions}
        with sgemm_client.Client(self.server.unix_target) as cl:
            a, b, c0 = random(self.rng, 111, 57), random(self.rng, 57, 31), random(self.rng, 111, 31)
            got, summary = cl.multiply(a, b, c0, 1.5, 0.25, timeout=60)
            self.assertEqual((summary.transport, summary.bytes_sent, summary.bytes_received), ("shm-copy", 0, 0))
            self.assertEqual(summary.rpc, "unary")
            self.assertLessEqual(max_error(got, a, b, c0, 1.5, 0.25), TOLERANCE)
            # Clients of one process share their connection to a target: look at what this one added.
            mine = lambda: {r.name for r in cl.regions().regions} - before  # noqa: E731
            self.assertEqual(len(mine()), 1)
            first = mine()
            for _ in range(3):
                got, _ = cl.multiply(a, b, timeout=60)
                self.assertLessEqual(max_error(got, a, b), TOLERANCE)
            self.assertEqual(mine(), first)  # kept and reused
            big_a, big_b = random(self.rng, 333, 201), random(self.rng, 201, 99)
            got, _ = cl.multiply(big_a, big_b, timeout=60)  # needs more: replaced, not added
            self.assertLessEqual(max_error(got, big_a, big_b), TOLERANCE)
            self.assertEqual(len(mine()), 1)
            self.assertNotEqual(mine(), first)
        # rpc "stream": the same product, its header on a stream.
        with sgemm_client.Client(self.server.unix_target, rpc="stream") as cl:
            got, summary = cl.multiply(a, b, c0, 1.5, 0.25, timeout=60)
            self.assertEqual((summary.transport, summary.rpc), ("shm-copy", "stream"))
            self.assertLessEqual(max_error(got, a, b, c0, 1.5, 0.25), TOLERANCE)
        # transport "grpc" on the same socket: the bytes travel.
        with sgemm_client.Client(self.server.unix_target, transport="grpc") as cl:
            got, summary = cl.multiply(a, b, timeout=60)
            self.assertEqual(summary.transport, "grpc")
            self.assertGreater(summary.bytes_sent, 0)
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)

    def test_registering_memory_the_caller_shares(self):
        cl = self.client
        m, n, k = 45, 23, 67
        shm = shared_memory.SharedMemory(create=True, size=(m * k + k * n) * 4)
        try:
            whole = np.ndarray((m * k + k * n,), dtype=np.float32, buffer=shm.buf)
            a, b = whole[:m * k].reshape(m, k), whole[m * k:].reshape(k, n)
            a[...], b[...] = random(self.rng, m, k), random(self.rng, k, n)
            mapped = cl.register(shm)
            self.assertEqual(mapped.shape, (m * k + k * n,))
            # Both the caller's own views and the returned array are in the region.
            out = cl.empty((m, n))
            _, summary = cl.multiply(a, b, out=out, timeout=60)
            self.assertEqual(summary.transport, "shm")
            self.assertLessEqual(max_error(out, a, b), TOLERANCE)
            _, summary = cl.multiply(mapped[:m * k].reshape(m, k), mapped[m * k:].reshape(k, n), out=out,
                                     timeout=60)
            self.assertEqual(summary.transport, "shm")
            # By name too (a second registration of the same object).
            by_name = cl.register("/" + shm.name, shape=(m * k + k * n,))
            np.testing.assert_array_equal(by_name, whole)
            # A resident matrix taken from a region: no byte through gRPC.
            h = cl.put(b)
            got, _ = cl.multiply(a, h, timeout=60)
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)
            cl.delete(h)
            # Unregistered: the array is ordinary memory again (copied through the scratch region).
            self.assertEqual(cl.unregister(mapped), 0)
            self.assertEqual(cl.unregister(by_name), 0)
            _, summary = cl.multiply(a, b, out=out, timeout=60)
            self.assertEqual(summary.transport, "shm-copy")
            self.assertLessEqual(max_error(out, a, b), TOLERANCE)
            with self.assertRaisesRegex(ValueError, "not in a region"):
                cl.unregister(np.zeros(3, np.float32))
            with self.assertRaisesRegex(TypeError, "not in shared memory"):
                cl.register(np.zeros(3, np.float32))
            del whole, a, b, mapped, by_name
        finally:
            shm.close()
            shm.unlink()

    def test_a_socket_with_no_server_yet_is_retried_as_unavailable(self):
        with sgemm_client.Client(f"unix:{self.server.dir}/nobody.sock", retries=2, backoff_s=0.01) as cl:
            with self.assertRaises(sgemm_client.SgemmError) as e:
                cl.multiply(np.ones((2, 2)), np.ones((2, 2)), timeout=10)
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(cl.unavailable_retries, 2)

    def test_another_clients_regions_are_not_usable(self):
        d = self.server.dir / "tokens"
        d.mkdir(exist_ok=True)
        (d / "tokens.json").write_text(json.dumps({"clients": [{"name": "alice", "token": "alice-token-0123456789"},
                                                               {"name": "bob", "token": "bob-token-0123456789"}]}))
        server = ServerProcess("--auth-tokens", str(d / "tokens.json"), "--cpu-threads", "1", unix=True)
        try:
            alice = sgemm_client.Client(server.unix_target, token="alice-token-0123456789")
            x, y = alice.empty((9, 7)), alice.empty((7, 5))
            x[...], y[...] = random(self.rng, 9, 7), random(self.rng, 7, 5)
            got, _ = alice.multiply(x, y, timeout=60)
            self.assertLessEqual(max_error(got, x, y), TOLERANCE)
            names = [r.name for r in alice.regions().regions]
            self.assertEqual(len(names), 2)
            with sgemm_client.Client(server.unix_target, token="bob-token-0123456789") as bob:
                self.assertEqual([r.name for r in bob.regions().regions], [])
                header = pb2.GemmHeader(m=9, n=5, k=7, a_region=pb2.RegionRef(region=names[0]),
                                        b_region=pb2.RegionRef(region=names[1]))
                channel = grpc.insecure_channel(server.unix_target)
                rpc = channel.stream_stream("/sgemm.v1.Sgemm/Multiply", request_serializer=lambda r: r.SerializeToString(),
                                            response_deserializer=pb2.MultiplyResponse.FromString)
                with self.assertRaises(grpc.RpcError) as e:
                    list(rpc(iter([pb2.MultiplyRequest(header=header)]), timeout=30,
                             metadata=(("authorization", "Bearer bob-token-0123456789"),)))
                self.assertEqual(e.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
                self.assertIn("alice", e.exception.details())
                channel.close()
            # A client that closes its connection leaves no registration behind.
            alice.close()
            with sgemm_client.Client(server.unix_target, token="alice-token-0123456789") as again:
                give_up = time.monotonic() + 10
                while again.regions().regions and time.monotonic() < give_up:
                    time.sleep(0.02)
                self.assertEqual(list(again.regions().regions), [])
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
