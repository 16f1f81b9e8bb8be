"""sgemm_client.aio.Client (grpc.aio) against the real sgemm-server: the same
features as the blocking client, from one event loop: odd shapes with C and
alpha/beta, several requests at once, several connections for one request,
resident matrices, shared-memory regions on the Unix socket, retries while
the queue is full, deadlines, health, info and traces. Results against a
float64 numpy reference."""

import asyncio
import os
import unittest

import grpc
import numpy as np

import sgemm_client
from checks import TOLERANCE, max_error, random
from server_process import ServerProcess


class AsyncClient(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu-threads", "1", unix=True)
        cls.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.log()

    async def test_multiply_stripes_and_concurrency(self):
        async with sgemm_client.aio.Client(self.server.address, chunk_bytes=32 << 10) as cl:
            for m, n, k in ((1, 1, 1), (37, 61, 129), (211, 3, 97)):
                a, b, c0 = random(self.rng, m, k), random(self.rng, k, n), random(self.rng, m, n)
                got, summary = await cl.multiply(a, b, c0, 0.75, -1.25, timeout=60)
                self.assertLessEqual(max_error(got, a, b, c0, 0.75, -1.25), TOLERANCE)
                self.assertEqual(summary.transport, "grpc")
            # Several requests in flight from one loop.
            pairs = [(random(self.rng, 53 + i, 41), random(self.rng, 41, 29 + i)) for i in range(4)]
            results = await asyncio.gather(*(cl.multiply(a, b, timeout=60) for a, b in pairs))
            for (a, b), (got, _) in zip(pairs, results):
                self.assertLessEqual(max_error(got, a, b), TOLERANCE)
            # One request over 3 connections (32 KiB chunks: blocks of 35 rows of A, 12 of them to spread).
            a, b = random(self.rng, 401, 233), random(self.rng, 233, 157)
            got, summary = await cl.multiply(a, b, connections=3, timeout=60)
            self.assertEqual(summary.stripes, 3)
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)
            # Trace, health, info.
            _, summary = await cl.multiply(a[:5], b, trace=True, timeout=60)
            self.assertTrue(summary.trace()["traceEvents"])
            self.assertEqual(await cl.health(), "SERVING")
            self.assertEqual((await cl.info()).backend, "cpu")

    async def test_one_message_each_way_when_the_product_fits(self):
        # rpc "auto": MultiplyUnary for a product whose operands and C fit one message each way, as the
        # blocking client; the stream above the limit, or when asked for.
        a, b, c0 = random(self.rng, 37, 29), random(self.rng, 29, 53), random(self.rng, 37, 53)
        async with sgemm_client.aio.Client(self.server.address) as cl:
            got, summary = await cl.multiply(a, b, c0, 1.5, -0.5, timeout=60)
            self.assertEqual(summary.rpc, "unary")
            self.assertLessEqual(max_error(got, a, b, c0, 1.5, -0.5), TOLERANCE)
            self.assertIn("rpc=unary", self.server.request_log_line(summary.request_id))
            big_a, big_b = random(self.rng, 1100, 3), random(self.rng, 3, 1100)
            got, summary = await cl.multiply(big_a, big_b, timeout=60)  # C alone is over the limit
            self.assertEqual(summary.rpc, "stream")
            self.assertLessEqual(max_error(got, big_a, big_b), TOLERANCE)
        async with sgemm_client.aio.Client(self.server.address, rpc="stream") as cl:
            got, summary = await cl.multiply(a, b, timeout=60)
            self.assertEqual(summary.rpc, "stream")
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)
        # Over shared memory (the scratch region): the header alone goes, C comes back in the answer.
        async with sgemm_client.aio.Client(self.server.unix_target) as cl:
            got, summary = await cl.multiply(a, b, c0, 2.0, 0.5, timeout=60)
            self.assertEqual((summary.transport, summary.rpc), ("shm-copy", "unary"))
            self.assertLessEqual(max_error(got, a, b, c0, 2.0, 0.5), TOLERANCE)

    async def test_resident_matrices(self):
        async with sgemm_client.aio.Client(self.server.address) as cl:
            a, b = random(self.rng, 71, 39), random(self.rng, 39, 23)
            h = await cl.put(b, label="b")
            got, _ = await cl.multiply(a, h, timeout=60)
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)
            kept, summary = await cl.multiply(a, h, keep=True, timeout=60)
            self.assertEqual(str(kept), summary.result_handle)
            got, _ = await cl.multiply(kept, np.eye(23, dtype=np.float32), timeout=60)
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)
            listed = {mi.handle for mi in (await cl.list()).matrices}
            self.assertTrue({h, kept} <= listed)
            self.assertEqual(await cl.delete(h), 0)
            self.assertEqual(await cl.delete(kept), 0)
            with self.assertRaises(sgemm_client.SgemmError) as e:
                await cl.delete(h)
            self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    async def test_shared_memory_on_the_unix_socket(self):
        async with sgemm_client.aio.Client(self.server.unix_target) as cl:
            self.assertEqual(await cl.transport(), "shm")
            x, y, z = await cl.empty((93, 45)), await cl.empty((45, 67)), await cl.empty((93, 67))
            x[...], y[...] = random(self.rng, 93, 45), random(self.rng, 45, 67)
            got, summary = await cl.multiply(x, y, out=z, timeout=60)
            self.assertIs(got, z)
            self.assertEqual((summary.transport, summary.proto.bytes_received, summary.proto.bytes_sent), ("shm", 0, 0))
            self.assertLessEqual(max_error(z, x, y), TOLERANCE)
            a, b = random(self.rng, 31, 17), random(self.rng, 17, 11)
            got, summary = await cl.multiply(a, b, timeout=60)
            self.assertEqual(summary.transport, "shm-copy")
            self.assertLessEqual(max_error(got, a, b), TOLERANCE)
            self.assertEqual(await cl.unregister(x), 0)

    async def test_errors_retries_and_deadlines(self):
        async with sgemm_client.aio.Client(self.server.address) as cl:
            with self.assertRaisesRegex(ValueError, "a's columns must equal b's rows"):
                await cl.multiply(np.ones((3, 4)), np.ones((5, 2)))
            with self.assertRaises(sgemm_client.SgemmError) as e:
                await cl.multiply(np.ones((3, 4)), np.ones((4, 2)), alpha=float("nan"), timeout=30)
            self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("alpha", e.exception.details)
            with self.assertRaises(sgemm_client.SgemmError) as e:
                await cl.multiply(random(self.rng, 512, 512), random(self.rng, 512, 512), timeout=0.001)
            self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
            with self.assertRaises(sgemm_client.SgemmError) as e:
                await cl.empty((2, 2))
            self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        busy = ServerProcess("--max-in-flight", "1", "--max-queued", "0", "--cpu-threads", "1")
        try:
            # Streams: each holds the one slot while its operands arrive, so five at once overlap and
            # some are refused (five MultiplyUnary products may each finish before the next arrives).
            async with sgemm_client.aio.Client(busy.address, retries=200, backoff_s=0.01,
                                               max_backoff_s=0.05, rpc="stream") as cl:
                a, b = random(self.rng, 384, 384), random(self.rng, 384, 384)
                results = await asyncio.gather(*(cl.multiply(a, b, timeout=120) for _ in range(5)))
                for got, _ in results:
                    self.assertLessEqual(max_error(got, a, b), TOLERANCE)
                self.assertGreater(cl.unavailable_retries, 0)
        finally:
            self.assertEqual(busy.stop(), 0)


if __name__ == "__main__":
    unittest.main()
