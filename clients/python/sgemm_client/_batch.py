"""Many products in one Multiply request (GemmHeader.batch / group; docs/transport.md, "Batches and
groups"): every product's A concatenated into one matrix, B and C likewise, sent on one stream; C's
chunks come back into one flat array, split into the products' matrices at the end, and the summary
gives each product's status. Both clients drive a BatchRequest as they drive a Request (_request.py).

A list of same-shaped pairs is sent as a strided batch (header.batch), any other as a group
(header.group).

Other sources, as multiply() has them:
  - a handle (from put()) in place of a_list or b_list: one resident matrix that every product of a
    strided batch reads (header.a_handle / b_handle); it is not sent;
  - arrays in this client's shared-memory regions (empty()) laid out one after another, dense, in product
    order (each list one region reference to the concatenation: `regions_of()` makes such lists): no
    operand byte crosses gRPC; `out` (a list of the same kind) receives every C in place of chunks.

A product that failed on the server (summary.products[i].code != 0; e.g. a NaN in its
inputs with check_finite=True) comes back as None in the list of C unless fail_fast=True, which fails the
whole call with that product's error.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import grpc
import numpy as np

from . import _wire
from ._proto import sgemm_pb2 as pb2
from ._request import KERNELS, OPS, PRECISIONS, SPLITS, _region_ref, as_matrix, parse_op
from ._types import SgemmError, Summary
from .regions import RegionTable, SharedRegion

MAX_PRODUCTS = 65536  # the server's bound on products per request


def concatenated_ref(regions: Optional[RegionTable], arrays: Sequence[Any]) -> Optional[Tuple[SharedRegion, int, int]]:
    """(region, byte offset, 0) when `arrays` are dense float32 matrices in one region, each starting where
    the one before ends (a batch's operand, concatenated in place); None otherwise."""
    if regions is None or not arrays:
        return None
    first = None
    end = 0
    for x in arrays:
        ref = regions.ref(x) if isinstance(x, np.ndarray) else None
        if ref is None or ref[2] != 0:
            return None
        region, offset, _ = ref
        if first is None:
            first = ref
        elif region is not first[0] or offset != end:
            return None
        end = offset + x.size * 4
    return first


class BatchRequest:
    """Everything one multiply_batch() call sends and expects."""

    mode = "stream"
    transport = "grpc"

    def __init__(self, a_list: Any, b_list: Any, c_list: Optional[Sequence[Any]],
                 alpha: float, beta: float, *, precision: str, kernel: Optional[str], split: Optional[str],
                 op_a: str, op_b: str, fail_fast: bool, check_finite: bool, trace: bool, chunk_bytes: int,
                 regions: Optional[RegionTable] = None, handle_shapes: Optional[Dict[str, Tuple[int, int]]] = None,
                 out: Optional[Sequence[np.ndarray]] = None):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of pingpong, cublas or None, got {kernel!r}")
        if split not in (None, "auto", "single"):
            raise ValueError(f"split must be None, 'auto' or 'single' for a batch (it is split by product), "
                             f"got {split!r}")
        op_a, op_b = parse_op("op_a", op_a), parse_op("op_b", op_b)
        # A handle in place of a list: one resident matrix every product reads (a strided batch).
        handles = {}
        for which, x in ((_wire.MATRIX_A, a_list), (_wire.MATRIX_B, b_list)):
            if isinstance(x, str):
                shape = getattr(x, "shape", None) or (handle_shapes or {}).get(str(x))
                if shape is None:
                    raise ValueError(f"handle {x!r}: its shape is unknown (put() it through this client or list())")
                handles[which] = (str(x), tuple(shape))
        if len(handles) == 2:
            raise ValueError("a_list and b_list are both handles: one of them must list every product's operand")
        if _wire.MATRIX_A in handles:
            a_list = [_Shaped(handles[_wire.MATRIX_A][1])] * len(b_list)
        if _wire.MATRIX_B in handles:
            b_list = [_Shaped(handles[_wire.MATRIX_B][1])] * len(a_list)
        if len(a_list) != len(b_list):
            raise ValueError(f"{len(a_list)} A matrices and {len(b_list)} B matrices: one of each per product")
        if not a_list:
            raise ValueError("a batch needs at least one product")
        if len(a_list) > MAX_PRODUCTS:
            raise ValueError(f"{len(a_list)} products: the server takes at most {MAX_PRODUCTS} per request")
        if c_list is not None and len(c_list) != len(a_list):
            raise ValueError(f"{len(c_list)} C matrices for {len(a_list)} products")
        a_arrays = [x if isinstance(x, _Shaped) else as_matrix(f"a[{i}]", x) for i, x in enumerate(a_list)]
        b_arrays = [x if isinstance(x, _Shaped) else as_matrix(f"b[{i}]", x) for i, x in enumerate(b_list)]
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
        if handles and any(s != shapes[0] for s in shapes):
            raise ValueError("a handle is shared by every product of a strided batch: every product must have "
                             f"one shape, got {sorted(set(shapes))}")
        self.shapes = shapes
        self.has_c = c_arrays is not None
        self.c_offsets = np.cumsum([0] + [m * n for m, n, _ in shapes]).tolist()
        self.chunk_elems = max(1, chunk_bytes // 4)
        # Regions: every operand list concatenated in place in a region (and `out` likewise), no handle.
        refs = {w: concatenated_ref(regions, xs) for w, xs in
                ((_wire.MATRIX_A, a_arrays), (_wire.MATRIX_B, b_arrays), (_wire.MATRIX_C, c_arrays or []))}
        in_regions = (not handles and refs[_wire.MATRIX_A] is not None and refs[_wire.MATRIX_B] is not None
                      and (not self.has_c or refs[_wire.MATRIX_C] is not None))
        self.out = None
        out_ref = None
        if out is not None:
            if len(out) != len(shapes) or any(not isinstance(o, np.ndarray) or o.shape != (m, n)
                                               for o, (m, n, _) in zip(out, shapes)):
                raise ValueError(f"out must list one m x n float32 array per product ({len(shapes)})")
            out_ref = concatenated_ref(regions, out)
            if out_ref is None or not in_regions:
                raise ValueError("out must be arrays in one of this client's regions, one after another in "
                                 "product order, with every operand in regions too (regions_of())")
            self.out = list(out)
        self.transport = "shm" if in_regions else "grpc"
        self.arrays = {}
        ranges = []
        if not in_regions:
            # One copy per uploaded operand into its concatenation (the wire carries each as one matrix).
            if _wire.MATRIX_A not in handles:
                self.arrays[_wire.MATRIX_A] = np.concatenate([x.reshape(-1) for x in a_arrays])
            if _wire.MATRIX_B not in handles:
                self.arrays[_wire.MATRIX_B] = np.concatenate([x.reshape(-1) for x in b_arrays])
            if c_arrays is not None:
                self.arrays[_wire.MATRIX_C] = np.concatenate([x.reshape(-1) for x in c_arrays])
            for w in (_wire.MATRIX_B, _wire.MATRIX_C, _wire.MATRIX_A):
                if w in self.arrays:
                    ranges.append(_wire.StripeRange(w, 0, self.arrays[w].size))
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
        h.a_handle = handles.get(_wire.MATRIX_A, ("", None))[0]
        h.b_handle = handles.get(_wire.MATRIX_B, ("", None))[0]
        if in_regions:
            _region_ref(h.a_region, refs[_wire.MATRIX_A])
            _region_ref(h.b_region, refs[_wire.MATRIX_B])
            if self.has_c:
                _region_ref(h.c_region, refs[_wire.MATRIX_C])
            if out_ref is not None:
                _region_ref(h.out_region, out_ref)
        self.header = h
        # C comes back as chunks unless it goes to `out` in a region.
        self.result = np.zeros(0 if self.out else self.c_offsets[-1], dtype=np.float32)

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
                          bytes_received=receiver.received * 4, transport=self.transport,
                          first_c_before_upload_end=False)
        out: List[Optional[np.ndarray]] = []
        for i, (m, n, _) in enumerate(self.shapes):
            ok = proto.products[i].code == 0
            if not ok:
                out.append(None)
            elif self.out is not None:
                out.append(self.out[i])
            else:
                out.append(self.result[self.c_offsets[i]:self.c_offsets[i + 1]].reshape(m, n))
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
            if p.code == 0 and self.req.out is None:  # C written into `out` sends no chunk
                expected += p.c_elements
        if self.received != expected:
            raise SgemmError(grpc.StatusCode.INTERNAL, f"the stream carried {self.received} values of C; the "
                             f"products that succeeded hold {expected}")


class _Shaped:
    """Stands for a handle's matrix in the shape checks: what a product reads, never sent."""

    def __init__(self, shape: Tuple[int, int]):
        self.shape = shape


def regions_of(empty, shapes: Sequence[Tuple[int, int]]) -> List[np.ndarray]:
    """One region (from `empty`, a Client's empty()) holding len(shapes) zeroed float32 matrices one after
    another: fill them and pass the list to multiply_batch, which names the region instead of sending them."""
    total = sum(r * c for r, c in shapes)
    flat = empty((1, max(total, 1))).reshape(-1)
    out, at = [], 0
    for r, c in shapes:
        out.append(flat[at:at + r * c].reshape(r, c))
        at += r * c
    return out


def product_errors(summary: Summary) -> List[Tuple[int, SgemmError]]:
    """(index, error) of every product that failed."""
    return [(p.index, SgemmError(_status_code(p.code), p.message)) for p in summary.proto.products if p.code != 0]


def _status_code(code: int) -> grpc.StatusCode:
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c
    return grpc.StatusCode.UNKNOWN
