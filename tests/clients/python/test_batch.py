"""Batched and grouped products from Python against the real sgemm-server (cpu
backend): multiply_batch(list_of_a, list_of_b) as a strided batch (7 products
of 33x17x29) and as a group of odd shapes from 1x1x1 to 129x65x257, every
op(A)/op(B) with alpha, beta and C, each product against a float64 numpy
reference; a product with a NaN input comes back None with its status
(check_finite), or fails the call (fail_fast); bad lists are refused before
anything is sent; the asyncio client on the same request. Over the Unix
socket: lists of arrays in regions named in place (C back as chunks or into
`out` arrays in a region), and one resident B or A shared by every product of
a strided batch; a missing handle refused naming its field."""

import asyncio
import os
import time
import unittest

import grpc
import numpy as np

import sgemm_client
import sgemm_client.aio
from checks import TOLERANCE, max_error, random
from server_process import ServerProcess

STRIDED = [(33, 17, 29)] * 7
GROUP = [(1, 1, 1), (1, 65, 33), (47, 1, 19), (33, 17, 29), (7, 129, 3), (3, 5, 1), (129, 65, 257), (64, 64, 64)]
SCALARS = ((1.0, 0.0, False), (-1.5, 0.75, True))


def stored(x, op):
    return np.ascontiguousarray(x.T) if op == "t" else x


class Batch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu-threads", "1")
        cls.client = sgemm_client.Client(cls.server.address, chunk_bytes=4096)
        cls.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        assert cls.server.stop() == 0, cls.server.log()

    def operands(self, shapes):
        a = [random(self.rng, m, k) for m, n, k in shapes]
        b = [random(self.rng, k, n) for m, n, k in shapes]
        c = [random(self.rng, m, n) for m, n, k in shapes]
        return a, b, c

    def test_strided_batch_and_group_every_op_with_alpha_beta_and_c(self):
        for name, shapes in (("strided", STRIDED), ("group", GROUP)):
            for op_a in "nt":
                for op_b in "nt":
                    for alpha, beta, with_c in SCALARS:
                        with self.subTest(kind=name, op_a=op_a, op_b=op_b, alpha=alpha, with_c=with_c):
                            a, b, c0 = self.operands(shapes)
                            got, summary = self.client.multiply_batch(
                                [stored(x, op_a) for x in a], [stored(x, op_b) for x in b],
                                c0 if with_c else None, alpha, beta, op_a=op_a, op_b=op_b, timeout=60)
                            self.assertEqual(len(got), len(shapes))
                            self.assertEqual(summary.products_failed, 0)
                            self.assertEqual(len(summary.products), len(shapes))
                            self.assertIn("strided batch of 7" if name == "strided" else "group of 8",
                                          summary.plan_reason)
                            for i, (m, n, k) in enumerate(shapes):
                                self.assertEqual(got[i].shape, (m, n))
                                self.assertLessEqual(
                                    max_error(got[i], a[i], b[i], c0[i] if with_c else None, alpha, beta), TOLERANCE)

    def test_a_non_finite_product_is_reported_alone_or_fails_the_call(self):
        a, b, c0 = self.operands(GROUP)
        a[3][2, 5] = np.nan
        got, summary = self.client.multiply_batch(a, b, c0, 0.5, 2.0, check_finite=True, timeout=60)
        self.assertIsNone(got[3])
        self.assertEqual(summary.products_failed, 1)
        self.assertEqual(summary.products[3].code, grpc.StatusCode.INVALID_ARGUMENT.value[0])
        self.assertIn("product 3 (33x17x29): A holds a non-finite value", summary.products[3].message)
        for i in range(len(GROUP)):
            if i != 3:
                self.assertLessEqual(max_error(got[i], a[i], b[i], c0[i], 0.5, 2.0), TOLERANCE)
        with self.assertRaises(sgemm_client.SgemmError) as err:
            self.client.multiply_batch(a, b, c0, check_finite=True, fail_fast=True, timeout=60)
        self.assertEqual(err.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("product 3", err.exception.details)

    def test_bad_lists_are_refused_before_sending(self):
        a, b, _ = self.operands(GROUP[:3])
        with self.assertRaisesRegex(ValueError, "3 A matrices and 2 B matrices"):
            self.client.multiply_batch(a, b[:2])
        with self.assertRaisesRegex(ValueError, "product 1: op\\(a\\) is 1x33"):
            self.client.multiply_batch(a, [b[0], b[0], b[2]])
        with self.assertRaisesRegex(ValueError, "split must be"):
            self.client.multiply_batch(a, b, split="rows")
        with self.assertRaisesRegex(ValueError, "at least one product"):
            self.client.multiply_batch([], [])

    def test_asyncio_client_runs_the_same_group(self):
        a, b, c0 = self.operands(GROUP)

        async def run():
            async with sgemm_client.aio.Client(self.server.address) as cl:
                return await cl.multiply_batch(a, b, c0, 2.0, -1.0, op_a="n", timeout=60)

        got, summary = asyncio.run(run())
        self.assertEqual(summary.products_failed, 0)
        for i in range(len(GROUP)):
            self.assertLessEqual(max_error(got[i], a[i], b[i], c0[i], 2.0, -1.0), TOLERANCE)


class BatchSources(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu-threads", "1", unix=True)
        cls.client = sgemm_client.Client(cls.server.unix_target, chunk_bytes=4096)
        cls.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        assert cls.server.stop() == 0, cls.server.log()

    def tearDown(self):
        # Every request's host memory is back in the server's budget, within a deadline.
        deadline = time.monotonic() + 10
        while self.client.info().load.host_bytes_in_use != 0:
            self.assertLess(time.monotonic(), deadline, "host memory still in use")
            time.sleep(0.005)

    def test_region_lists_are_named_in_place(self):
        cl = self.client
        for name, shapes in (("strided", STRIDED[:5]), ("group", GROUP[:6])):
            for op_a, op_b in (("n", "n"), ("t", "t")):
                with self.subTest(name=name, op_a=op_a, op_b=op_b):
                    a = sgemm_client.regions_of(cl.empty, [(m, k) if op_a == "n" else (k, m) for m, n, k in shapes])
                    b = sgemm_client.regions_of(cl.empty, [(k, n) if op_b == "n" else (n, k) for m, n, k in shapes])
                    c = sgemm_client.regions_of(cl.empty, [(m, n) for m, n, k in shapes])
                    out = sgemm_client.regions_of(cl.empty, [(m, n) for m, n, k in shapes])
                    for x in a + b + c:
                        x[...] = random(self.rng, *x.shape)
                    ref_a = [x.T if op_a == "t" else x for x in a]
                    ref_b = [x.T if op_b == "t" else x for x in b]
                    got, summary = cl.multiply_batch(a, b, c, -1.5, 0.75, op_a=op_a, op_b=op_b, out=out, timeout=60)
                    self.assertEqual((summary.transport, summary.bytes_sent, summary.bytes_received), ("shm", 0, 0))
                    for i in range(len(shapes)):
                        self.assertIs(got[i], out[i])
                        self.assertLessEqual(max_error(got[i], ref_a[i], ref_b[i], c[i], -1.5, 0.75), TOLERANCE)
                    # Without out, C comes back as chunks.
                    got, summary = cl.multiply_batch(a, b, op_a=op_a, op_b=op_b, timeout=60)
                    self.assertEqual(summary.bytes_sent, 0)
                    self.assertEqual(summary.bytes_received, sum(m * n for m, n, _ in shapes) * 4)
                    for i in range(len(shapes)):
                        self.assertLessEqual(max_error(got[i], ref_a[i], ref_b[i]), TOLERANCE)

    def test_one_resident_b_or_a_for_every_product(self):
        cl = self.client
        m, n, k = 37, 23, 19
        for op_b in "nt":
            weights = random(self.rng, k, n)
            h = cl.put(stored(weights, op_b))
            a = [random(self.rng, m, k) for _ in range(6)]
            c0 = [random(self.rng, m, n) for _ in range(6)]
            got, summary = cl.multiply_batch(a, h, c0, 2.0, -0.5, op_b=op_b, timeout=60)
            self.assertEqual(summary.bytes_sent, (6 * m * k + 6 * m * n) * 4)  # B is not sent
            for i in range(6):
                self.assertLessEqual(max_error(got[i], a[i], weights, c0[i], 2.0, -0.5), TOLERANCE)
            cl.delete(h)
        shared_a = random(self.rng, m, k)
        h = cl.put(shared_a)
        b = [random(self.rng, k, n) for _ in range(4)]
        got, _ = cl.multiply_batch(h, b, timeout=60)
        for i in range(4):
            self.assertLessEqual(max_error(got[i], shared_a, b[i]), TOLERANCE)
        with self.assertRaises(ValueError):  # a shared operand needs one shape for every product
            cl.multiply_batch(h, [random(self.rng, k, n), random(self.rng, k, n + 1)])
        cl.delete(h)
        missing = sgemm_client.Handle("0123456789abcdef0123456789abcdef", (k, n))
        with self.assertRaises(sgemm_client.SgemmError) as e:
            cl.multiply_batch(a, missing, timeout=60)
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("header.b_handle", e.exception.details)


if __name__ == "__main__":
    unittest.main()
