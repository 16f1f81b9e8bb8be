"""sgemm_client's retry loop and chunking, without a server: a stub that
answers UNAVAILABLE a given number of times, then streams C back."""

import unittest

import grpc
import numpy as np

import sgemm_client
from sgemm_client import pb2


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class FlakyStub:
    """Multiply fails with `code` `failures` times, then answers C = 7 in chunks of 2 values."""

    def __init__(self, failures, code=grpc.StatusCode.UNAVAILABLE):
        self.failures, self.code, self.calls, self.requests = failures, code, 0, []

    def Multiply(self, requests, timeout=None, metadata=None):
        self.calls += 1
        self.requests = list(requests)  # a fresh, complete request stream each attempt
        if self.calls <= self.failures:
            raise FakeRpcError(self.code, "queue full (16 waiting): retry with backoff")
        h = self.requests[0].header
        total = h.m * h.n
        for off in range(0, total, 2):
            data = np.full(min(2, total - off), 7.0, dtype="<f4").tobytes()
            yield pb2.MultiplyResponse(chunk=pb2.MatrixChunk(matrix=pb2.MATRIX_C, offset=off, data=data))
        yield pb2.MultiplyResponse(summary=pb2.MultiplySummary(backend="fake", total_ms=1.0))


def client_with(stub, **options):
    client = sgemm_client.Client("127.0.0.1:1", backoff_s=0.001, max_backoff_s=0.002, **options)
    client._stub = stub
    return client


class Retries(unittest.TestCase):
    def test_unavailable_is_retried_with_a_fresh_stream(self):
        stub = FlakyStub(failures=3)
        with client_with(stub, retries=5, chunk_bytes=8) as client:
            c, summary = client.multiply(np.ones((3, 5)), np.ones((5, 3)))
        self.assertEqual(stub.calls, 4)
        self.assertEqual(client.unavailable_retries, 3)
        np.testing.assert_array_equal(c, np.full((3, 3), 7.0, dtype=np.float32))
        self.assertEqual(summary.backend, "fake")
        # header, then A (15 values) and B (15 values) in chunks of 2 values.
        chunks = [r.chunk for r in stub.requests[1:]]
        self.assertEqual(len(chunks), 16)
        self.assertEqual([c.offset for c in chunks if c.matrix == pb2.MATRIX_A], list(range(0, 15, 2)))
        self.assertTrue(all(len(c.data) <= 8 for c in chunks))

    def test_gives_up_after_the_retries(self):
        stub = FlakyStub(failures=10)
        with client_with(stub, retries=2) as client:
            with self.assertRaises(sgemm_client.SgemmError) as e:
                client.multiply(np.ones((2, 2)), np.ones((2, 2)))
        self.assertEqual(stub.calls, 3)
        self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("queue full", str(e.exception))

    def test_other_codes_are_not_retried(self):
        stub = FlakyStub(failures=1, code=grpc.StatusCode.INVALID_ARGUMENT)
        with client_with(stub, retries=5) as client:
            with self.assertRaises(sgemm_client.SgemmError) as e:
                client.multiply(np.ones((2, 2)), np.ones((2, 2)))
        self.assertEqual(stub.calls, 1)
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    def test_chunk_bytes_must_fit_the_wire_limit(self):
        with self.assertRaisesRegex(ValueError, "chunk_bytes"):
            sgemm_client.Client("127.0.0.1:1", chunk_bytes=4 << 20)


if __name__ == "__main__":
    unittest.main()
