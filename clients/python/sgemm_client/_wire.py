"""sgemm.v1's data plane by hand: chunk messages framed around the caller's
bytes, chunks of C read in place, and how a request is spread over stripes.

Why by hand: protobuf's `bytes` field would take one copy of each payload
(`tobytes()`) and serializing a second; framing a chunk ourselves costs one
(joining a few bytes of framing with a view of the caller's array), and a
chunk of C is copied once, from the message into C. The framing is
byte-exact with protobuf's encoding (tests/clients/python/test_wire.py checks it
against the generated classes). Messages without a payload (headers,
attaches, summaries, grants) go through the generated classes.

Threads: pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from ._proto import sgemm_pb2 as pb2

MAX_CHUNK_BYTES = 4 * 1024 * 1024 - 1024  # sgemm.v1's limit per MatrixChunk.data
FP32 = np.dtype("<f4")

MATRIX_A, MATRIX_B, MATRIX_C = pb2.MATRIX_A, pb2.MATRIX_B, pb2.MATRIX_C

# Payload below which a request uses one connection when none is asked for
# (A + B + C in, C out), and how many it uses above: client/stripe_plan.h's rule.
STRIPE_AUTO_THRESHOLD_BYTES = 16 << 20
STRIPE_AUTO_CONNECTIONS = 4

# MultiplyUnary's limit on the matrix payload each way (Limits.max_unary_bytes):
# a product whose A + B (+ C) and C each fit travels as one message each way.
UNARY_MAX_BYTES = (4 << 20) - (64 << 10)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def chunk_frame(matrix: int, offset: int, payload: memoryview) -> bytes:
    """A MultiplyRequest (or PutMatrixRequest: both carry `chunk` as field 2)
    holding MatrixChunk{matrix, offset, data=payload}, as protobuf would encode it."""
    nbytes = payload.nbytes
    inner = b"\x08" + _varint(matrix) + (b"\x10" + _varint(offset) if offset else b"") + b"\x1a" + _varint(nbytes)
    return b"".join((b"\x12", _varint(len(inner) + nbytes), inner, payload))


def _read_varint(data: bytes, pos: int) -> Tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


@dataclass
class CChunk:
    """A chunk of C inside a received message: values [offset, offset + count) at byte `start` of `data`."""

    data: bytes
    matrix: int
    offset: int
    start: int
    count: int

    def values(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=FP32, count=self.count, offset=self.start)


def decode_response(data: bytes):
    """A MultiplyResponse: a CChunk for a chunk (read in place), else the parsed message."""
    if data[:1] != b"\x0a":  # not field 1 (chunk): summary or stripe grant
        return pb2.MultiplyResponse.FromString(data)
    length, pos = _read_varint(data, 1)
    end = pos + length
    matrix = offset = 0
    start = count = 0
    while pos < end:
        tag, pos = _read_varint(data, pos)
        wire = tag & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            if tag >> 3 == 1:
                matrix = value
            elif tag >> 3 == 2:
                offset = value
        elif wire == 2:
            n, pos = _read_varint(data, pos)
            if tag >> 3 == 3:
                if n % 4:
                    raise ValueError(f"a chunk of C holds {n} bytes, not a multiple of 4")
                start, count = pos, n // 4
            pos += n
        elif wire == 5:
            pos += 4
        elif wire == 1:
            pos += 8
        else:
            raise ValueError(f"a chunk of C has a field of wire type {wire}")
    if end != len(data) or pos != end:
        raise ValueError("a chunk of C overruns its message")
    return CChunk(data, matrix, offset, start, count)


def fits_unary(m: int, n: int, k: int, has_c: bool, named=frozenset()) -> bool:
    """Whether an m x n x k product (with an input C when has_c) fits MultiplyUnary; the matrices in `named`
    (MATRIX_A, MATRIX_B, MATRIX_C: named by handle) are not sent."""
    sent = ((0 if MATRIX_A in named else m * k) + (0 if MATRIX_B in named else k * n) +
            (m * n if has_c and MATRIX_C not in named else 0))
    return 4 * sent <= UNARY_MAX_BYTES and 4 * m * n <= UNARY_MAX_BYTES


def decode_unary_response(data: bytes) -> list:
    """A MultiplyUnaryResponse (c = 1, summary = 2: MultiplyResponse's field numbers), as the messages
    decode_response() makes of each field: C's chunk read in place, then the summary."""
    view = memoryview(data)
    out, pos = [], 0
    while pos < len(data):
        start = pos
        tag, pos = _read_varint(data, pos)
        if tag & 7 != 2:
            raise ValueError(f"a MultiplyUnaryResponse field of wire type {tag & 7}")
        n, pos = _read_varint(data, pos)
        pos += n
        if pos > len(data):
            raise ValueError("a MultiplyUnaryResponse field overruns the message")
        if tag >> 3 == 1:
            out.append(decode_response(view[start:pos]))
        elif tag >> 3 == 2:
            out.append(decode_response(bytes(view[start:pos])))
    return out


def stripes_for(m: int, n: int, k: int, has_c: bool, requested: int) -> int:
    """Connections for a request: `requested` when > 0, else by payload size."""
    if requested > 0:
        return requested
    payload = (m * k + k * n + m * n * (2 if has_c else 1)) * 4
    return 1 if payload < STRIPE_AUTO_THRESHOLD_BYTES else STRIPE_AUTO_CONNECTIONS


@dataclass
class StripeRange:
    matrix: int  # MATRIX_A / B / C
    begin: int  # elements [begin, end) of that matrix
    end: int


@dataclass
class StripePlan:
    stripes: int = 1
    stripe_rows: int = 0  # rows per block (0 with one stripe)
    per_stripe: List[List[StripeRange]] = field(default_factory=list)  # what each stripe sends, in order


def plan_stripes(m: int, n: int, k: int, has_c: bool, stripes: int, chunk_bytes: int, op_a: str = "n",
                 op_b: str = "n") -> StripePlan:
    """The server's rule (GemmHeader.stripes): the STORED rows of every matrix (A is k x m under
    op_a = "t", B n x k under op_b = "t") cut into blocks of stripe_rows, block j on stripe j % stripes,
    each stripe sending its blocks of B, then C, then A; ranges are elements of the stored matrices.
    Blocks hold at most chunk_bytes of the widest stored matrix, and there are no more stripes than C
    has blocks (each stripe answers with its rows of C)."""
    a_rows, a_width = (k, m) if op_a == "t" else (m, k)
    b_rows, b_width = (n, k) if op_b == "t" else (k, n)
    rows = max(1, chunk_bytes // 4 // max(1, a_width, b_width, n))
    c_blocks = -(-m // rows)
    count = max(1, min(stripes, c_blocks))
    plan = StripePlan(stripes=count, per_stripe=[[] for _ in range(count)])
    if count == 1:
        plan.per_stripe[0] = [StripeRange(MATRIX_B, 0, k * n)]
        if has_c:
            plan.per_stripe[0].append(StripeRange(MATRIX_C, 0, m * n))
        plan.per_stripe[0].append(StripeRange(MATRIX_A, 0, m * k))
        return plan
    plan.stripe_rows = rows

    def add(matrix: int, height: int, width: int) -> None:
        for j, r in enumerate(range(0, height, rows)):
            plan.per_stripe[j % count].append(StripeRange(matrix, r * width, min(height, r + rows) * width))

    add(MATRIX_B, b_rows, b_width)
    if has_c:
        add(MATRIX_C, m, n)
    add(MATRIX_A, a_rows, a_width)
    return plan


def chunk_frames(ranges: List[StripeRange], arrays: dict, chunk_elems: int, skip: Optional[set] = None):
    """Yields (message, payload bytes) for the chunks of `ranges` (never crossing a range's end) from
    arrays[matrix] (1-D '<f4', C-contiguous); matrices in `skip` are not sent (named by handle)."""
    for r in ranges:
        if skip and r.matrix in skip:
            continue
        view = memoryview(arrays[r.matrix]).cast("B")
        for off in range(r.begin, r.end, chunk_elems):
            end = min(off + chunk_elems, r.end)
            yield chunk_frame(r.matrix, off, view[off * 4:end * 4]), (end - off) * 4
