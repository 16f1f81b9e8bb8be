"""sgemm_client's hand-made framing and stripe plan, without a server: chunk
messages byte-exact with protobuf's encoding, chunks of C read in place, and
the stripes' shares as the server's rule (GemmHeader.stripes) defines them."""

import unittest

import numpy as np

from sgemm_client import _wire, pb2


class Framing(unittest.TestCase):
    def test_chunk_frames_are_what_protobuf_writes(self):
        rng = np.random.default_rng(7)
        for matrix in (pb2.MATRIX_A, pb2.MATRIX_B, pb2.MATRIX_C):
            for offset in (0, 1, 127, 128, 300, 1 << 21, (1 << 35) + 3):
                for count in (1, 31, 32, 33, 4097, 262144):
                    data = rng.standard_normal(count).astype("<f4")
                    ours = _wire.chunk_frame(matrix, offset, memoryview(data).cast("B"))
                    theirs = pb2.MultiplyRequest(chunk=pb2.MatrixChunk(matrix=matrix, offset=offset,
                                                                       data=data.tobytes())).SerializeToString()
                    self.assertEqual(ours, theirs, (matrix, offset, count))
                    # PutMatrixRequest carries its chunk in the same field.
                    self.assertEqual(pb2.PutMatrixRequest.FromString(ours).chunk.offset, offset)

    def test_chunks_of_c_are_read_in_place(self):
        values = np.arange(1000, dtype="<f4")
        for offset in (0, 5, 1 << 30):
            msg = pb2.MultiplyResponse(chunk=pb2.MatrixChunk(matrix=pb2.MATRIX_C, offset=offset,
                                                            data=values.tobytes())).SerializeToString()
            got = _wire.decode_response(msg)
            self.assertIsInstance(got, _wire.CChunk)
            self.assertEqual((got.matrix, got.offset, got.count), (pb2.MATRIX_C, offset, 1000))
            np.testing.assert_array_equal(got.values(), values)
        summary = pb2.MultiplyResponse(summary=pb2.MultiplySummary(backend="cpu")).SerializeToString()
        self.assertEqual(_wire.decode_response(summary).summary.backend, "cpu")
        grant = pb2.MultiplyResponse(stripe_grant=pb2.StripeGrant(token=b"t" * 16, stripes=4)).SerializeToString()
        self.assertEqual(_wire.decode_response(grant).stripe_grant.stripes, 4)
        with self.assertRaisesRegex(ValueError, "multiple of 4"):
            _wire.decode_response(pb2.MultiplyResponse(chunk=pb2.MatrixChunk(matrix=3, data=b"abc"))
                                  .SerializeToString())


class Stripes(unittest.TestCase):
    def test_auto_uses_one_connection_below_16_mib_and_four_above(self):
        self.assertEqual(_wire.stripes_for(1024, 1024, 1024, False, 0), 1)  # 12 MiB
        self.assertEqual(_wire.stripes_for(2048, 2048, 2048, False, 0), 4)  # 48 MiB
        self.assertEqual(_wire.stripes_for(8, 8, 8, False, 3), 3)

    def test_every_element_once_b_then_c_then_a_block_j_on_stripe_j_mod_n(self):
        for m, n, k, has_c, stripes, chunk in ((1000, 300, 257, True, 4, 64 << 10), (33, 5, 7, False, 8, 64),
                                               (100, 100, 100, False, 1, 1 << 20), (7, 3, 3, True, 16, 40)):
            plan = _wire.plan_stripes(m, n, k, has_c, stripes, chunk)
            rows = max(1, chunk // 4 // max(k, n))
            self.assertLessEqual(plan.stripes, -(-m // rows))
            sizes = {pb2.MATRIX_A: m * k, pb2.MATRIX_B: k * n, pb2.MATRIX_C: m * n}
            widths = {pb2.MATRIX_A: k, pb2.MATRIX_B: n, pb2.MATRIX_C: n}
            seen = {w: np.zeros(s, dtype=int) for w, s in sizes.items()}
            for s, ranges in enumerate(plan.per_stripe):
                order = [r.matrix for r in ranges]
                self.assertEqual(order, sorted(order, key=[pb2.MATRIX_B, pb2.MATRIX_C, pb2.MATRIX_A].index))
                for r in ranges:
                    seen[r.matrix][r.begin:r.end] += 1
                    if plan.stripes > 1:
                        block = r.begin // widths[r.matrix] // plan.stripe_rows
                        self.assertEqual(block % plan.stripes, s)
                        self.assertLessEqual(r.end - r.begin, plan.stripe_rows * widths[r.matrix])
            for w in (pb2.MATRIX_A, pb2.MATRIX_B) + ((pb2.MATRIX_C,) if has_c else ()):
                self.assertTrue(np.all(seen[w] == 1), (m, n, k, w))

    def test_transposed_operands_are_cut_by_their_stored_rows(self):
        # Stored A is k x m under op_a = "t", stored B n x k under op_b = "t": their block counts differ
        # from C's, which alone bounds the stripes.
        for m, n, k in ((301, 131, 67), (97, 23, 211), (40, 300, 5)):
            for op_a in "nt":
                for op_b in "nt":
                    for stripes in (2, 3, 4):
                        for has_c in (False, True):
                            with self.subTest(shape=(m, n, k), op_a=op_a, op_b=op_b, stripes=stripes, has_c=has_c):
                                plan = _wire.plan_stripes(m, n, k, has_c, stripes, 4096, op_a, op_b)
                                self.assertEqual(plan.stripes, stripes)
                                widths = {pb2.MATRIX_A: m if op_a == "t" else k,
                                          pb2.MATRIX_B: k if op_b == "t" else n, pb2.MATRIX_C: n}
                                seen = {pb2.MATRIX_A: np.zeros(m * k, dtype=int),
                                        pb2.MATRIX_B: np.zeros(k * n, dtype=int),
                                        pb2.MATRIX_C: np.zeros(m * n, dtype=int)}
                                for s, ranges in enumerate(plan.per_stripe):
                                    for r in ranges:
                                        seen[r.matrix][r.begin:r.end] += 1
                                        self.assertEqual(r.begin % (plan.stripe_rows * widths[r.matrix]), 0)
                                        self.assertEqual(r.begin // widths[r.matrix] // plan.stripe_rows
                                                         % plan.stripes, s)
                                        self.assertLessEqual((r.end - r.begin) * 4, 4096)
                                for w in (pb2.MATRIX_A, pb2.MATRIX_B) + ((pb2.MATRIX_C,) if has_c else ()):
                                    self.assertTrue(np.all(seen[w] == 1), w)
        # 8 rows of C bound 8 stripes although the stored A (op_a = "t") has 64 rows.
        self.assertEqual(_wire.plan_stripes(2, 1024, 64, False, 8, 4096, "t", "n").stripes, 2)


if __name__ == "__main__":
    unittest.main()
