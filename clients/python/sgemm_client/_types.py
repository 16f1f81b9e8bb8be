"""What the client hands back: errors, resident-matrix handles, request summaries."""

from __future__ import annotations

import json
from typing import Any, List, Optional, Tuple

import grpc

from ._proto import sgemm_pb2 as pb2


class SgemmError(Exception):
    """A request that failed: `code` is the grpc.StatusCode, `details` the server's message (it names the
    field at fault)."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class WorkerError(SgemmError):
    """A stripe's worker process (Client(stripe_workers="processes")) died or stopped answering during a
    request (code ABORTED; not retried). The client replaces the worker on its next request."""

    def __init__(self, details: str):
        super().__init__(grpc.StatusCode.ABORTED, details)


def error_of(e: grpc.RpcError) -> SgemmError:
    return SgemmError(e.code(), e.details() or "")


class Handle(str):
    """A resident matrix's handle (32 hex digits): a str, pass it wherever a matrix goes. `shape` is
    (rows, cols); `placement` says where the server put it ("GPU 0 rows 0-4096", "host rows 0-10")."""

    shape: Tuple[int, int]
    placement: str

    def __new__(cls, handle: str, shape: Tuple[int, int], placement: str = "") -> "Handle":
        h = super().__new__(cls, handle)
        h.shape = (int(shape[0]), int(shape[1]))
        h.placement = placement
        return h

    def __reduce__(self):
        return Handle, (str(self), self.shape, self.placement)


class Summary:
    """The server's sgemm.v1.MultiplySummary (each of its fields reads as an attribute: backend, kernel,
    kernel_rows, devices, queue_ms, receive_ms, compute_ms, total_ms, trace_json, result_handle, ...; the message itself
    is `proto`), and what the client saw of the call."""

    __slots__ = ("proto", "wall_ms", "attempts", "bytes_sent", "bytes_received", "transport",
                 "first_c_before_upload_end", "rpc")

    def __init__(self, proto: pb2.MultiplySummary, *, wall_ms: float, attempts: int, bytes_sent: int,
                 bytes_received: int, transport: str, first_c_before_upload_end: bool, rpc: str = "stream"):
        self.proto = proto
        self.wall_ms = wall_ms  # client wall time, retries included
        self.attempts = attempts  # 1 + retries after UNAVAILABLE
        self.bytes_sent = bytes_sent  # matrix payload sent through gRPC (0 with regions)
        self.bytes_received = bytes_received  # matrix payload received through gRPC
        self.transport = transport  # "grpc", "shm" (the caller's regions) or "shm-copy" (a scratch region)
        # The first chunk of C arrived before the upload ended: the server computed during the upload.
        self.first_c_before_upload_end = first_c_before_upload_end
        self.rpc = rpc  # "stream" (Multiply) or "unary" (MultiplyUnary: one message each way)

    def __getattr__(self, name: str) -> Any:
        if name == "proto":  # not set yet (copying, unpickling): no message to forward to
            raise AttributeError(name)
        return getattr(self.proto, name)

    @property
    def precision_name(self) -> str:
        """The arithmetic contract that ran: "fp32", "fp32-ffma", "tf32" or "fp32x3"."""
        return {pb2.PRECISION_TF32: "tf32", pb2.PRECISION_FP32X3: "fp32x3",
                pb2.PRECISION_FP32_FFMA: "fp32-ffma"}.get(self.proto.precision, "fp32")

    def kernel_launches(self) -> List[Tuple[str, int]]:
        """Every concrete kernel that ran and its launches, in the order of first use:
        [("fp32x3_wgmma_...", 7), ("cublas_sgemm", 1)]; `kernel` is the one with the most.
        Empty from an older server."""
        return [(r.name, r.launches) for r in self.proto.kernel_rows]

    def trace(self) -> Optional[dict]:
        """The Chrome trace-event JSON the server sent (multiply(..., trace=True)), parsed; None without one."""
        return json.loads(self.proto.trace_json) if self.proto.trace_json else None

    def __repr__(self) -> str:
        p = self.proto
        return (f"Summary(request_id={p.request_id!r}, backend={p.backend!r}, kernel={p.kernel!r}, "
                f"total_ms={p.total_ms:.3f}, wall_ms={self.wall_ms:.3f}, transport={self.transport!r})")
