"""Python client for sgemm-server (sgemm.v1): C = alpha*A*B + beta*C on the server's GPUs.

    import numpy as np, sgemm_client
    c, summary = sgemm_client.multiply(np.ones((3, 4)), np.ones((4, 5)), target="localhost:50051")

Needs grpcio and numpy (Debian: python3-grpcio, python3-numpy); the sgemm.v1
stubs are generated from proto/, never committed (see _stubs.py).
"""

from .client import MAX_CHUNK_BYTES, ChunkedTransport, Client, SgemmError, multiply, pb2

__all__ = ["Client", "SgemmError", "multiply", "ChunkedTransport", "MAX_CHUNK_BYTES", "pb2"]
