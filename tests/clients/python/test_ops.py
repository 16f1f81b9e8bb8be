"""Transposed operands from Python against the real sgemm-server (cpu backend):
multiply(a, b, op_a='t') in every combination with alpha, beta and C, numpy
Fortran-order arrays and `.T` views sent without a copy (as the row-major
array under them, op flipped), handles stored transposed, blocks of resident matrices (a_at), and the errors that
name the bad argument. Results against a float64 numpy reference on odd
shapes, and the asyncio client on the same cases."""

import asyncio
import os
import unittest

import numpy as np

import sgemm_client
import sgemm_client.aio
from checks import TOLERANCE, max_error, random
from server_process import ServerProcess

SHAPES = ((37, 53, 29), (1, 61, 40), (45, 1, 33), (23, 19, 1), (64, 128, 96))
SCALARS = ((1.0, 0.0, False), (-1.5, 0.75, True))


def stored(x, op):
    """x as the caller stores it under op: its transpose, made row-major, for "t"."""
    return np.ascontiguousarray(x.T) if op == "t" else x


class Ops(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu-threads", "1")
        cls.client = sgemm_client.Client(cls.server.address)
        cls.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        assert cls.server.stop() == 0, cls.server.log()

    def test_every_op_combination_with_alpha_beta_and_c(self):
        for m, n, k in SHAPES:
            for op_a in "nt":
                for op_b in "nt":
                    for alpha, beta, with_c in SCALARS:
                        with self.subTest(shape=(m, n, k), op_a=op_a, op_b=op_b, alpha=alpha, with_c=with_c):
                            a, b, c0 = random(self.rng, m, k), random(self.rng, k, n), random(self.rng, m, n)
                            got, summary = self.client.multiply(stored(a, op_a), stored(b, op_b),
                                                                c0 if with_c else None, alpha, beta, op_a=op_a,
                                                                op_b=op_b, timeout=60)
                            self.assertEqual(got.shape, (m, n))
                            self.assertLessEqual(max_error(got, a, b, c0 if with_c else None, alpha, beta),
                                                 TOLERANCE)
                            self.assertIn(f"op_a = {op_a}, op_b = {op_b}" if "t" in op_a + op_b else "",
                                          summary.proto.plan_reason)

    def test_every_op_combination_striped_over_two_to_four_connections(self):
        # Each stripe carries blocks of the stored rows: with op_a = "t" A's 300 stored rows of
        # 64 x 7 x 300 make other blocks than C's 64.
        # Over 2 and 4 connections with a thread per stripe, over 3 with a worker process per stripe.
        for connections, workers in ((2, "threads"), (3, "processes"), (4, "threads")):
            client = sgemm_client.Client(self.server.address, connections=connections, chunk_bytes=2048,
                                         stripe_workers=workers)
            try:
                for m, n, k in ((301, 131, 67), (64, 7, 300), (150, 41, 9)):
                    for op_a in "nt":
                        for op_b in "nt":
                            for alpha, beta, with_c in SCALARS:
                                with self.subTest(connections=connections, shape=(m, n, k), op_a=op_a, op_b=op_b,
                                                  with_c=with_c):
                                    a, b, c0 = random(self.rng, m, k), random(self.rng, k, n), random(self.rng, m, n)
                                    got, summary = client.multiply(stored(a, op_a), stored(b, op_b),
                                                                   c0 if with_c else None, alpha, beta, op_a=op_a,
                                                                   op_b=op_b, timeout=60)
                                    self.assertEqual(summary.stripes, connections)
                                    self.assertLessEqual(max_error(got, a, b, c0 if with_c else None, alpha, beta),
                                                         TOLERANCE)
            finally:
                client.close()

    def test_fortran_order_and_transposed_views_travel_without_a_copy(self):
        m, n, k = 70, 33, 51
        a, b = random(self.rng, m, k), random(self.rng, k, n)
        fa, fb = np.asfortranarray(a), np.asfortranarray(b)
        self.assertFalse(fa.flags.c_contiguous)
        got, summary = self.client.multiply(fa, fb, timeout=60)
        self.assertLessEqual(max_error(got, a, b), TOLERANCE)
        # Sent as the row-major arrays under them, with the ops flipped.
        self.assertIn("op_a = t, op_b = t", summary.proto.plan_reason)
        self.assertEqual(summary.bytes_sent, 4 * (m * k + k * n))
        # A .T view of a row-major array, and a Fortran array said to be transposed.
        at = np.ascontiguousarray(a.T)  # k x m, row-major
        got, summary = self.client.multiply(at.T, b, timeout=60)
        self.assertIn("op_a = t, op_b = n", summary.proto.plan_reason)
        self.assertLessEqual(max_error(got, a, b), TOLERANCE)
        got, summary = self.client.multiply(np.asfortranarray(at), b, op_a="t", timeout=60)
        self.assertNotIn("op_a = t", summary.proto.plan_reason)  # the flip undid the op: sent as it is
        self.assertLessEqual(max_error(got, a, b), TOLERANCE)

    def test_handles_stored_transposed(self):
        m, n, k = 29, 41, 17
        a, b = random(self.rng, m, k), random(self.rng, k, n)
        ha, hb = self.client.put(np.ascontiguousarray(a.T)), self.client.put(np.ascontiguousarray(b.T))
        got, summary = self.client.multiply(ha, hb, op_a="t", op_b="T", timeout=60)
        self.assertLessEqual(max_error(got, a, b), TOLERANCE)
        self.assertEqual(summary.bytes_sent, 0)
        for h in (ha, hb):
            self.client.delete(h)

    def test_blocks_of_resident_matrices(self):
        m, n, k = 13, 9, 11
        a, b, c0 = random(self.rng, m, k), random(self.rng, k, n), random(self.rng, m, n)
        big_a = np.full((k + 5, m + 3), np.nan, np.float32)  # A stored transposed at (4, 2)
        big_a[4:4 + k, 2:2 + m] = a.T
        big_c = np.full((m + 1, n + 2), np.nan, np.float32)
        big_c[1:, 2:] = c0
        ha, hc = self.client.put(big_a), self.client.put(big_c)
        got, summary = self.client.multiply(ha, b, hc, 0.5, -1.0, op_a="t", a_at=(4, 2, k, m), c_at=(1, 2, m, n),
                                            timeout=60)
        self.assertLessEqual(max_error(got, a, b, c0, 0.5, -1.0), TOLERANCE)
        self.assertEqual(summary.bytes_sent, 4 * k * n)  # B alone travels
        with self.assertRaises(sgemm_client.SgemmError) as e:  # rows 6-17 of a 16-row matrix
            self.client.multiply(ha, b, op_a="t", a_at=(6, 2, k, m), timeout=60)
        self.assertIn("header.a_at", e.exception.details)
        with self.assertRaisesRegex(ValueError, "a_at names a block of a resident matrix"):
            self.client.multiply(a, b, a_at=(0, 0, m, k))
        for h in (ha, hc):
            self.client.delete(h)

    def test_bad_ops_and_shapes_say_what_is_wrong(self):
        a, b = random(self.rng, 5, 4), random(self.rng, 4, 3)
        with self.assertRaisesRegex(ValueError, "op_a must be 'n' or 't'"):
            self.client.multiply(a, b, op_a="x")
        with self.assertRaisesRegex(ValueError, "op\\(a\\)'s columns must equal op\\(b\\)'s rows"):
            self.client.multiply(a, b, op_a="t")  # op(a) is 4 x 5, b is 4 x 3

    def test_the_asyncio_client_sends_the_same_ops(self):
        async def run():
            async with sgemm_client.aio.Client(self.server.address) as cl:
                a, b = random(self.rng, 31, 22), random(self.rng, 22, 13)
                got, summary = await cl.multiply(np.ascontiguousarray(a.T), np.asfortranarray(b), op_a="t",
                                                 timeout=60)
                self.assertLessEqual(max_error(got, a, b), TOLERANCE)
                self.assertIn("op_a = t, op_b = t", summary.proto.plan_reason)
        asyncio.run(run())


if __name__ == "__main__":
    unittest.main()
