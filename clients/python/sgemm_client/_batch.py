"""Many products in one Multiply request (GemmHeader.batch / group; docs/transport.md, "Batches and
groups"): every product's A concatenated into one matrix, B and C likewise, sent on one stream; C's
chunks come back into one flat array, split into the products' matrices at the end, and the summary
gives each product's status. Both clients drive a BatchRequest as they drive a Request (_request.py).

A list of same-shaped pairs is sent as a strided batch (header.batch), any other as a group
(header.group). A product that failed on the server (summary.products[i].code != 0; e.g. a NaN in its
inputs with check_finite=True) comes back as None in the list of C unless fail_fast=True, which fails the
whole call with that product's error.
"""

from __future__ import annotations

import threading
import time
from typing import Any, List, Optional, Sequence, Tuple

import grpc
import numpy as np

from . import _wire
from ._proto import sgemm_pb2 as pb2
from ._request import KERNELS, OPS, PRECISIONS, SPLITS, as_matrix, parse_op
from ._types import SgemmError, Summary

MAX_PRODUCTS = 65536  # the server's bound on products per request


class BatchRequest:
    """Everything one multiply_batch() call sends and expects."""

    mode = "stream"
    transport = "grpc"

    def __init__(self, a_list: Sequence[Any], b_list: Sequence[Any], c_list: Optional[Sequence[Any]],
                 alpha: float, beta: float, *, precision: str, kernel: Optional[str], split: Optional[str],
                 op_a: str, op_b: str, fail_fast: bool, check_finite: bool, trace: bool, chunk_bytes: int):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of pingpong, cublas or None, got {kernel!r}")
        if split not in (None, "auto", "single"):
            raise ValueError(f"split must be None, 'auto' or 'single' for a batch (it is split by product), "
                             f"got {split!r}")
        op_a, op_b = parse_op("op_a", op_a), parse_op("op_b", op_b)
        if len(a_list) != len(b_list):
            raise ValueError(f"{len(a_list)} A matrices and {len(b_list)} B matrices: one of each per product")
        if not a_list:
            raise ValueError("a batch needs at least one product")
        if len(a_list) > MAX_PRODUCTS:
            raise ValueError(f"{len(a_list)} products: the server takes at most {MAX_PRODUCTS} per request")
        if c_list is not None and len(c_list) != len(a_list):
            raise ValueError(f"{len(c_list)} C matrices for {len(a_list)} products")
        a_arrays = [as_matrix(f"a[{i}]", x) for i, x in enumerate(a_list)]
        b_arrays = [as_matrix(f"b[{i}]", x) for i, x in enumerate(b_list)]
        shapes: List[Tuple[int, int, int]] = []
        for i, (a, b) in enumerate(zip(a_arrays, b_arrays)):
            m, k = a.shape if op_a == "n" else a.shape[::-1]
            kb, n = b.shape if op_b == "n" else b.shape[::-1]
            if kb != k:
                raise ValueError(f"product {i}: op(a) is {m}x{k} and op(b) is {kb}x{n}: op(a)'s columns must equal "
                                 f"op(b)'s rows (op_a={op_a!r}, op_b={op_b!r})")
            shapes.append((m, n, k))
        c_arrays = None
        if c_list is not None:
            c_arrays = [as_matrix(f"c[{i}]", x) for i, x in enumerate(c_list)]
            for i, (c, (m, n, _)) in enumerate(zip(c_arrays, shapes)):
                if c.shape != (m, n):
                    raise ValueError(f"product {i}: c has shape {c.shape}, expected {(m, n)}")
        self.shapes = shapes
        self.has_c = c_arrays is not None
        self.c_offsets = np.cumsum([0] + [m * n for m, n, _ in shapes]).tolist()
        self.chunk_elems = max(1, chunk_bytes // 4)
        # One copy per operand into its concatenation (the wire carries each as one matrix).
        self.arrays = {_wire.MATRIX_A: np.concatenate([x.reshape(-1) for x in a_arrays]),
                       _wire.MATRIX_B: np.concatenate([x.reshape(-1) for x in b_arrays])}
        if c_arrays is not None:
            self.arrays[_wire.MATRIX_C] = np.concatenate([x.reshape(-1) for x in c_arrays])
        ranges = [_wire.StripeRange(_wire.MATRIX_B, 0, self.arrays[_wire.MATRIX_B].size)]
        if self.has_c:
            ranges.append(_wire.StripeRange(_wire.MATRIX_C, 0, self.arrays[_wire.MATRIX_C].size))
        ranges.append(_wire.StripeRange(_wire.MATRIX_A, 0, self.arrays[_wire.MATRIX_A].size))
        self.plan = _wire.StripePlan(1, 0, [ranges])
        h = pb2.GemmHeader(alpha=float(alpha), beta=float(beta), has_c=self.has_c, kernel=KERNELS[kernel],
                           split=SPLITS[split], precision=PRECISIONS[precision], trace=trace, op_a=OPS[op_a],
                           op_b=OPS[op_b], fail_fast=fail_fast, check_finite=check_finite)
        if all(s == shapes[0] for s in shapes):
            h.m, h.n, h.k = shapes[0]
            h.batch = len(shapes)
        else:
            for m, n, k in shapes:
                h.group.add(m=m, n=n, k=k)
        self.header = h
        self.result = np.zeros(self.c_offsets[-1], dtype=np.float32)

    def header_message(self) -> bytes:
        return pb2.MultiplyRequest(header=self.header).SerializeToString()

    def new_receiver(self) -> "BatchReceiver":
        return BatchReceiver(self)

    def frames(self, stripe: int, token: bytes, receiver: "BatchReceiver"):
        """The header, then B (and C), then A in chunks (one stream: a batch is never striped)."""
        del stripe, token
        yield self.header_message()
        for frame, payload in _wire.chunk_frames(self.plan.per_stripe[0], self.arrays, self.chunk_elems):
            receiver.sent(payload)
            yield frame
        receiver.upload_done()

    def finish(self, receiver: "BatchReceiver", wall_ms: float, attempts: int):
        """(list of C, Summary): C[i] is product i's m x n result, or None when it failed
        (summary.products[i] says why)."""
        proto = receiver.summary
        summary = Summary(proto, wall_ms=wall_ms, attempts=attempts, bytes_sent=receiver.bytes_sent,
                          bytes_received=receiver.received * 4, transport="grpc", first_c_before_upload_end=False)
        out: List[Optional[np.ndarray]] = []
        for i, (m, n, _) in enumerate(self.shapes):
            ok = proto.products[i].code == 0
            out.append(self.result[self.c_offsets[i]:self.c_offsets[i + 1]].reshape(m, n) if ok else None)
        return out, summary


class BatchReceiver:
    """What comes back: chunks of the concatenated C, and the summary with each product's status."""

    def __init__(self, req: BatchRequest):
        self.req = req
        self.c = req.result
        self.summary: Optional[pb2.MultiplySummary] = None
        self.grant: Optional[bytes] = None
        self.received = 0
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self.t0 = time.monotonic()

    def sent(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_sent += nbytes

    def upload_done(self) -> None:
        pass

    def on_message(self, msg) -> None:
        if isinstance(msg, _wire.CChunk):
            if msg.matrix != _wire.MATRIX_C or msg.offset + msg.count > self.c.size:
                raise SgemmError(grpc.StatusCode.INTERNAL, f"the server sent a chunk outside C: matrix "
                                 f"{msg.matrix}, offset {msg.offset}, {msg.count} values")
            self.c[msg.offset:msg.offset + msg.count] = msg.values()
            with self._lock:
                self.received += msg.count
            return
        if msg.WhichOneof("kind") == "summary":
            self.summary = msg.summary

    def check(self) -> None:
        """After the stream ended OK: the summary with one status per product, and C of every product that
        succeeded, each at its own offset."""
        if self.summary is None:
            raise SgemmError(grpc.StatusCode.INTERNAL, "the stream ended without a summary")
        count = len(self.req.shapes)
        if len(self.summary.products) != count:
            raise SgemmError(grpc.StatusCode.INTERNAL, f"the summary reports {len(self.summary.products)} product "
                             f"statuses for {count} products")
        expected = 0
        for i, p in enumerate(self.summary.products):
            if p.index != i or p.c_offset != self.req.c_offsets[i]:
                raise SgemmError(grpc.StatusCode.INTERNAL, f"the summary's status {i} names product {p.index} at "
                                 f"C offset {p.c_offset}; expected {self.req.c_offsets[i]}")
            if p.code == 0:
                expected += p.c_elements
        if self.received != expected:
            raise SgemmError(grpc.StatusCode.INTERNAL, f"the stream carried {self.received} values of C; the "
                             f"products that succeeded hold {expected}")


def product_errors(summary: Summary) -> List[Tuple[int, SgemmError]]:
    """(index, error) of every product that failed."""
    return [(p.index, SgemmError(_status_code(p.code), p.message)) for p in summary.proto.products if p.code != 0]


def _status_code(code: int) -> grpc.StatusCode:
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c
    return grpc.StatusCode.UNKNOWN
