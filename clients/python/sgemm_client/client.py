"""sgemm_client.Client: C = alpha*A*B + beta*C on sgemm-server, from numpy.

The server takes matrices as a stream of chunks (sgemm.v1: each at most
4 MiB - 1 KiB), so one big message cannot work; this client does the
chunking, reassembles C from the server's chunks, and retries the whole
request when the server answers UNAVAILABLE (queue full, shutting down, not
reachable yet) with exponential backoff and jitter.
"""

import random
import threading
import time

import grpc
import numpy as np

from . import _stubs

pb2, pb2_grpc = _stubs.load()

_KERNELS = {None: pb2.KERNEL_UNSPECIFIED, "pingpong": pb2.KERNEL_PINGPONG, "cublas": pb2.KERNEL_CUBLAS}
_SPLITS = {None: pb2.SPLIT_UNSPECIFIED, "auto": pb2.SPLIT_UNSPECIFIED, "single": pb2.SPLIT_SINGLE,
           "rows": pb2.SPLIT_ROWS, "k": pb2.SPLIT_K}
_FP32 = np.dtype("<f4")
MAX_CHUNK_BYTES = 4 * 1024 * 1024 - 1024  # sgemm.v1's limit per MatrixChunk.data


class SgemmError(Exception):
    """A request that failed: `code` is the grpc.StatusCode, `details` the server's message."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class ChunkedTransport:
    """Sends A, B (and C) as MatrixChunk messages of at most chunk_bytes each.

    The one way matrices travel today. A shared-memory transport for a server
    on the same host (a later issue) would be another class with the same
    `requests()` method, picked in Client._transport_for(); nothing else here
    would change.
    """

    def __init__(self, chunk_bytes):
        if not 4 <= chunk_bytes <= MAX_CHUNK_BYTES:
            raise ValueError(f"chunk_bytes must be in [4, {MAX_CHUNK_BYTES}], got {chunk_bytes}")
        self.chunk_elems = chunk_bytes // 4

    def requests(self, header, matrices):
        """Yields the header, then each matrix's chunks in order. matrices: [(pb2.Matrix, 1-D '<f4' array)]."""
        yield pb2.MultiplyRequest(header=header)
        for which, flat in matrices:
            view = memoryview(flat).cast("B")
            for off in range(0, flat.size, self.chunk_elems):
                end = min(off + self.chunk_elems, flat.size)
                yield pb2.MultiplyRequest(
                    chunk=pb2.MatrixChunk(matrix=which, offset=off, data=view[off * 4:end * 4].tobytes()))


def _as_matrix(name, x):
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} has an empty dimension: shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=_FP32)


class Client:
    """A channel to one sgemm-server. Thread-safe: many threads may call multiply() at once.

    target: "host:port". chunk_bytes: payload of each chunk sent (1 MiB, as
    docs/transport.md measured). retries: how many times an UNAVAILABLE answer
    is retried (0 = never); backoff_s doubles from there up to max_backoff_s,
    each wait drawn uniformly from [wait/2, wait].
    """

    def __init__(self, target="localhost:50051", *, chunk_bytes=1 << 20, retries=5, backoff_s=0.05,
                 max_backoff_s=2.0, channel=None, tls_ca=None, tls_cert=None, tls_key=None, tls_server_name=None,
                 token=None):
        """tls_ca/tls_cert/tls_key: PEM file paths; any of them (or tls_server_name) makes the
        channel TLS (mutual with tls_cert and tls_key). token: bearer token sent with every call
        (servers started with --auth-tokens; docs/security.md)."""
        self.target = target
        self._transport = ChunkedTransport(chunk_bytes)
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        if channel is None and (tls_ca or tls_cert or tls_key or tls_server_name):
            if bool(tls_cert) != bool(tls_key):
                raise ValueError("a client certificate needs both tls_cert and tls_key")

            def read(path):
                with open(path, "rb") as f:
                    return f.read()

            creds = grpc.ssl_channel_credentials(root_certificates=read(tls_ca) if tls_ca else None,
                                                 private_key=read(tls_key) if tls_key else None,
                                                 certificate_chain=read(tls_cert) if tls_cert else None)
            options = [("grpc.ssl_target_name_override", tls_server_name)] if tls_server_name else []
            channel = grpc.secure_channel(target, creds, options=options)
        self._channel = channel or grpc.insecure_channel(target)
        self._stub = pb2_grpc.SgemmStub(self._channel)
        self._lock = threading.Lock()
        self.unavailable_retries = 0  # UNAVAILABLE answers retried so far (all threads)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _transport_for(self, a, b, c):
        # The hook for shared memory (a later issue): when the server is on this
        # host, return a transport that places the matrices in a shared segment.
        return self._transport

    def info(self, timeout=10.0):
        """The server's GetInfoResponse: devices, backends, kernels, limits, load."""
        try:
            return self._stub.GetInfo(pb2.GetInfoRequest(), timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise SgemmError(e.code(), e.details()) from None

    def multiply(self, a, b, c=None, alpha=1.0, beta=0.0, *, kernel=None, split=None, timeout=None):
        """Returns (C, summary): C = alpha*A*B + beta*C as an m x n float32 array, and the
        server's sgemm.v1.MultiplySummary (per-device shards and timings, queue/receive/compute/total ms).

        a: m x k, b: k x n, c: m x n or None (then C starts as zero and beta is
        unused). Anything numpy turns into a 2-D real array is accepted and sent
        as float32. kernel: None (server's choice), "pingpong" or "cublas";
        split: None/"auto", "single", "rows" or "k". timeout: seconds for the
        whole call, retries included (None = no deadline).
        Raises ValueError for inputs that cannot be multiplied, SgemmError for
        what the server refuses (its code and message).
        """
        a = _as_matrix("a", a)
        b = _as_matrix("b", b)
        (m, k), (kb, n) = a.shape, b.shape
        if kb != k:
            raise ValueError(f"a is {m}x{k} and b is {kb}x{n}: a's columns must equal b's rows")
        if c is not None:
            c = _as_matrix("c", c)
            if c.shape != (m, n):
                raise ValueError(f"c has shape {c.shape}, expected {(m, n)} (rows of a, columns of b)")
        if kernel not in _KERNELS:
            raise ValueError(f"kernel must be one of pingpong, cublas or None, got {kernel!r}")
        if split not in _SPLITS:
            raise ValueError(f"split must be one of auto, single, rows, k or None, got {split!r}")
        header = pb2.GemmHeader(m=m, n=n, k=k, alpha=float(alpha), beta=float(beta), has_c=c is not None,
                                kernel=_KERNELS[kernel], split=_SPLITS[split])
        matrices = [(pb2.MATRIX_A, a.reshape(-1)), (pb2.MATRIX_B, b.reshape(-1))]
        if c is not None:
            matrices.append((pb2.MATRIX_C, c.reshape(-1)))
        transport = self._transport_for(a, b, c)
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = self.backoff_s
        attempt = 0
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return self._multiply_once(transport.requests(header, matrices), m, n, remaining)
            except grpc.RpcError as e:
                code = e.code()
                if code != grpc.StatusCode.UNAVAILABLE or attempt >= self.retries:
                    raise SgemmError(code, e.details()) from None
                pause = random.uniform(wait / 2, wait)
                if deadline is not None and time.monotonic() + pause >= deadline:
                    raise SgemmError(code, f"{e.details()} (gave up after {attempt + 1} attempts: "
                                           "the deadline would pass)") from None
                attempt += 1
                with self._lock:
                    self.unavailable_retries += 1
                time.sleep(pause)
                wait = min(wait * 2, self.max_backoff_s)

    def _multiply_once(self, requests, m, n, timeout):
        out = np.empty(m * n, dtype=_FP32)
        received = 0
        summary = None
        for resp in self._stub.Multiply(requests, timeout=timeout, metadata=self._metadata):
            kind = resp.WhichOneof("kind")
            if kind == "chunk":
                part = np.frombuffer(resp.chunk.data, dtype=_FP32)
                off = resp.chunk.offset
                if resp.chunk.matrix != pb2.MATRIX_C or off < 0 or off + part.size > out.size:
                    raise SgemmError(grpc.StatusCode.INTERNAL,
                                     f"the server sent a chunk outside C: offset {off}, {part.size} values")
                out[off:off + part.size] = part
                received += part.size
            elif kind == "summary":
                summary = resp.summary
        if summary is None or received != m * n:
            raise SgemmError(grpc.StatusCode.INTERNAL,
                             f"the stream ended with {received} of {m * n} values of C"
                             f"{'' if summary is not None else ' and no summary'}")
        return out.reshape(m, n), summary


def multiply(a, b, c=None, alpha=1.0, beta=0.0, *, target="localhost:50051", kernel=None, split=None,
             timeout=None, **client_options):
    """One product on the server at `target`: returns (C, summary). See Client.multiply."""
    with Client(target, **client_options) as client:
        return client.multiply(a, b, c, alpha, beta, kernel=kernel, split=split, timeout=timeout)
