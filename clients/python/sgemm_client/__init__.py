"""Python client for sgemm-server (sgemm.v1): C = alpha*A*B + beta*C on the server's GPUs.

    import numpy as np, sgemm_client
    with sgemm_client.Client("localhost:50051") as cl:       # or "unix:/run/sgemm/sgemm.sock"
        c, summary = cl.multiply(a, b)

Blocking: sgemm_client.Client; asyncio: sgemm_client.aio.Client. docs/python.md
describes both. Needs grpcio, protobuf and numpy; the sgemm.v1 modules are
generated when the package is built (sgemm_client/_protogen.py).
"""

__version__ = "0.2.0"

from . import aio
from ._batch import regions_of
from ._proto import sgemm_pb2 as pb2
from ._types import Handle, SgemmError, Summary, WorkerError
from ._wire import MAX_CHUNK_BYTES
from .client import Client, Retry, multiply

__all__ = ["Client", "Handle", "SgemmError", "Summary", "WorkerError", "Retry", "multiply", "aio", "pb2",
           "MAX_CHUNK_BYTES", "regions_of", "__version__"]
