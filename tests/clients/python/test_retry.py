"""sgemm_client's retry loop and request order, without a server: a fake
Multiply that answers UNAVAILABLE a given number of times, then streams C back."""

import unittest

import grpc
import numpy as np

import sgemm_client
from sgemm_client import _wire, pb2


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class FakeCall:
    """What a streaming call gives back: an iterator of responses that can be cancelled."""

    def __init__(self, responses):
        self.responses, self.cancelled = responses, False

    def __iter__(self):
        return self.responses

    def cancel(self):
        self.cancelled = True


class FlakyMultiply:
    """Fails with `code` `failures` times, then answers C = 7 in chunks of 2 values (as decoded messages)."""

    def __init__(self, failures, code=grpc.StatusCode.UNAVAILABLE):
        self.failures, self.code, self.calls, self.requests = failures, code, 0, []

    def __call__(self, requests, timeout=None, metadata=None):
        self.calls += 1
        self.requests = [pb2.MultiplyRequest.FromString(r) for r in requests]  # a fresh stream each attempt
        return FakeCall(self._answer())

    def _answer(self):
        if self.calls <= self.failures:
            raise FakeRpcError(self.code, "queue full (16 waiting): retry with backoff")
        h = self.requests[0].header
        total = h.m * h.n
        for off in range(0, total, 2):
            data = np.full(min(2, total - off), 7.0, dtype="<f4").tobytes()
            msg = pb2.MultiplyResponse(chunk=pb2.MatrixChunk(matrix=pb2.MATRIX_C, offset=off, data=data))
            yield _wire.decode_response(msg.SerializeToString())
        yield pb2.MultiplyResponse(summary=pb2.MultiplySummary(backend="fake", total_ms=1.0))


def client_with(fake, **options):
    # The fake is the Multiply stream: the products here are small enough for MultiplyUnary otherwise.
    client = sgemm_client.Client("127.0.0.1:1", backoff_s=0.001, max_backoff_s=0.002, rpc="stream", **options)
    client._multiply_rpcs[0] = fake
    return client


class Retries(unittest.TestCase):
    def test_unavailable_is_retried_with_a_fresh_stream_b_first(self):
        fake = FlakyMultiply(failures=3)
        with client_with(fake, retries=5, chunk_bytes=8) as client:
            c, summary = client.multiply(np.ones((3, 5)), np.ones((5, 3)))
        self.assertEqual(fake.calls, 4)
        self.assertEqual(client.unavailable_retries, 3)
        self.assertEqual(summary.attempts, 4)
        np.testing.assert_array_equal(c, np.full((3, 3), 7.0, dtype=np.float32))
        self.assertEqual(summary.backend, "fake")
        # header, then B (15 values), then A (15 values), in chunks of 2 values: B first, so the
        # server can start computing while A arrives.
        chunks = [r.chunk for r in fake.requests[1:]]
        self.assertEqual(len(chunks), 16)
        self.assertEqual([c.matrix for c in chunks], [pb2.MATRIX_B] * 8 + [pb2.MATRIX_A] * 8)
        self.assertEqual([c.offset for c in chunks if c.matrix == pb2.MATRIX_A], list(range(0, 15, 2)))
        self.assertTrue(all(len(c.data) <= 8 for c in chunks))

    def test_c_goes_after_b_and_before_a(self):
        fake = FlakyMultiply(failures=0)
        with client_with(fake) as client:
            client.multiply(np.ones((2, 3)), np.ones((3, 2)), np.ones((2, 2)), beta=1.0)
        self.assertEqual([r.chunk.matrix for r in fake.requests[1:]], [pb2.MATRIX_B, pb2.MATRIX_C, pb2.MATRIX_A])
        self.assertTrue(fake.requests[0].header.has_c)

    def test_gives_up_after_the_retries(self):
        fake = FlakyMultiply(failures=10)
        with client_with(fake, retries=2) as client:
            with self.assertRaises(sgemm_client.SgemmError) as e:
                client.multiply(np.ones((2, 2)), np.ones((2, 2)))
        self.assertEqual(fake.calls, 3)
        self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("queue full", str(e.exception))

    def test_a_wait_past_the_deadline_ends_the_call(self):
        fake = FlakyMultiply(failures=10)
        client = sgemm_client.Client("127.0.0.1:1", retries=10, backoff_s=5.0, max_backoff_s=5.0, rpc="stream")
        client._multiply_rpcs[0] = fake
        with client, self.assertRaisesRegex(sgemm_client.SgemmError, "deadline would pass"):
            client.multiply(np.ones((2, 2)), np.ones((2, 2)), timeout=1.0)
        self.assertEqual(fake.calls, 1)

    def test_other_codes_are_not_retried(self):
        fake = FlakyMultiply(failures=1, code=grpc.StatusCode.INVALID_ARGUMENT)
        with client_with(fake, retries=5) as client:
            with self.assertRaises(sgemm_client.SgemmError) as e:
                client.multiply(np.ones((2, 2)), np.ones((2, 2)))
        self.assertEqual(fake.calls, 1)
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    def test_options_are_checked(self):
        with self.assertRaisesRegex(ValueError, "chunk_bytes"):
            sgemm_client.Client("127.0.0.1:1", chunk_bytes=4 << 20)
        with self.assertRaisesRegex(ValueError, "transport"):
            sgemm_client.Client("127.0.0.1:1", transport="carrier-pigeon")
        with self.assertRaisesRegex(ValueError, "connections"):
            sgemm_client.Client("127.0.0.1:1", connections=-1)
        with self.assertRaisesRegex(ValueError, "tls_cert and tls_key"):
            sgemm_client.Client("127.0.0.1:1", tls_cert="c.pem")


if __name__ == "__main__":
    unittest.main()
