"""sgemm_client.Client: the blocking client for sgemm-server (sgemm.v1).

    with sgemm_client.Client("host:50051") as cl:              # or "unix:/run/sgemm/sgemm.sock"
        c, summary = cl.multiply(a, b)                          # C = A B, numpy in and out
        h = cl.put(b); c, _ = cl.multiply(a, h)                 # B resident on the server
        x, y, z = cl.empty((m, k)), cl.empty((k, n)), cl.empty((m, n))   # arrays in shared memory
        cl.multiply(x, y, out=z)                                # no matrix byte through gRPC

Over TCP B (and C) go first, then A, so the server starts computing while A
arrives; large requests (16 MiB of payload and up) are spread over 4
connections, as the C++ client does. On the server's Unix socket the matrices
go through shared memory: arrays from `empty()`/`register()` are named where
they are, other arrays are copied into a scratch region the client keeps.
UNAVAILABLE (busy, shutting down, not reachable yet) is retried with
exponential backoff; `timeout` bounds a whole call, retries included.

Threads: a Client may serve many threads at once (gRPC channels are
thread-safe; the client's own state is behind locks). A multiply over several
connections reads each stripe's stream on a thread of its own, or has a
worker process drive it (stripe_workers, _stripe_pool.py); the workers run one
request at a time.
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc
import numpy as np

from . import _channel, _ring, _stripe_pool, _wire
from ._proto import health_pb2, health_pb2_grpc
from ._proto import sgemm_pb2 as pb2
from ._proto import sgemm_pb2_grpc as pb2_grpc
from ._batch import BatchRequest
from ._request import Matrix, Receiver, Request, first_failure, handles_without_shape, put_messages
from ._types import Handle, SgemmError, Summary, error_of
from .regions import RegionTable, SharedRegion

T = TypeVar("T")
Shape = Union[int, Tuple[int, ...]]
TRANSPORTS = ("auto", "grpc", "shm")
# Who drives the streams of a request spread over several connections: "threads" (one per stripe, in this
# interpreter), "processes" (a worker process per stripe, _stripe_pool.py) or "auto" (processes where they win).
STRIPE_WORKERS = ("auto", "threads", "processes")
RPCS = ("auto", "stream", "unary", "ring")
RING_SUMMARY_ROOM = 64 << 10  # an answer's summary without a trace fits in this
# "auto" takes processes when this process may run on at least this many CPUs: below it the workers' copies
# and the client share too few cores to gain on the threads (docs/python.md, "Several connections").
AUTO_PROCESSES_MIN_CPUS = 4


class Retry:
    """UNAVAILABLE is retried up to `retries` times; each wait is drawn uniformly from [w/2, w], w doubling
    from backoff_s to max_backoff_s; a wait that would pass the deadline ends the call instead."""

    def __init__(self, retries: int, backoff_s: float, max_backoff_s: float):
        if retries < 0 or backoff_s < 0 or max_backoff_s < backoff_s:
            raise ValueError("retries and backoff_s must be >= 0 and max_backoff_s >= backoff_s, got "
                             f"{retries}, {backoff_s}, {max_backoff_s}")
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s

    def pause(self, e: SgemmError, attempt: int, deadline: Optional[float]) -> float:
        """Seconds to wait before attempt `attempt + 1`, or raises e when it is not to be retried."""
        if e.code != grpc.StatusCode.UNAVAILABLE or attempt >= self.retries:
            raise e
        wait = min(self.backoff_s * 2**attempt, self.max_backoff_s)
        pause = random.uniform(wait / 2, wait)
        if deadline is not None and time.monotonic() + pause >= deadline:
            raise SgemmError(e.code, f"{e.details} (gave up after {attempt + 1} attempts: the deadline would "
                                     "pass)") from None
        return pause


def remaining(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _timeout_within(deadline: Optional[float], default: float = 10.0) -> float:
    """A side call's timeout (shape lookup, transport check, registration): what is left of the caller's
    deadline, else `default`."""
    return default if deadline is None else max(0.0, deadline - time.monotonic())


def deadline_of(timeout: Optional[float]) -> Optional[float]:
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds or None, got {timeout}")
    return None if timeout is None else time.monotonic() + timeout


def shape_tuple(shape: Shape) -> Tuple[int, ...]:
    t = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if not t or any(int(d) < 1 for d in t):
        raise ValueError(f"shape must have dimensions >= 1, got {shape}")
    return tuple(int(d) for d in t)


class ClientBase:
    """What the blocking and the asyncio Client set up alike: the constructor's arguments, checked; the
    channel (each subclass's `_make_channel`: sync or aio) with its stubs; the retry policy; and the
    per-client state both keep. `_own_state()` adds what only the subclass keeps."""

    _make_channel: Callable[..., Any] = staticmethod(_channel.sync_channel)
    rpcs: Tuple[str, ...] = RPCS  # the `rpc` values this client takes

    def __init__(self, target: str = "localhost:50051", *, token: Optional[str] = None, tls: bool = False,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None, chunk_bytes: int = 1 << 20, connections: int = 0,
                 retries: int = 5, backoff_s: float = 0.05, max_backoff_s: float = 2.0, transport: str = "auto",
                 channel_options: Sequence[Tuple[str, Any]] = (), stripe_workers: str = "auto", rpc: str = "auto"):
        if not 4 <= chunk_bytes <= _wire.MAX_CHUNK_BYTES:
            raise ValueError(f"chunk_bytes must be in [4, {_wire.MAX_CHUNK_BYTES}], got {chunk_bytes}")
        if connections < 0:
            raise ValueError(f"connections must be >= 0 (0 = by size), got {connections}")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        if rpc not in self.rpcs:
            raise ValueError(f"rpc must be one of {', '.join(self.rpcs)}, got {rpc!r}")
        if stripe_workers not in STRIPE_WORKERS:
            raise ValueError(f"stripe_workers must be one of {', '.join(STRIPE_WORKERS)}, got {stripe_workers!r}")
        if stripe_workers == "processes":  # checked before any channel exists
            why_not = _stripe_pool.available()
            if why_not:
                raise ValueError(f"stripe_workers='processes' cannot be used here: {why_not}")
        self.target = target
        self.chunk_bytes = chunk_bytes
        self.stripe_workers = stripe_workers
        self.rpc = rpc
        self.connections = connections
        self.retry = Retry(retries, backoff_s, max_backoff_s)
        self._want_transport = transport
        # make_config's arguments, kept for the stripe workers (each makes its own channel from them).
        self._channel_args = dict(target=target, token=token, tls=tls, tls_ca=tls_ca, tls_cert=tls_cert,
                                  tls_key=tls_key, tls_server_name=tls_server_name,
                                  channel_options=tuple(channel_options))
        self._cfg = _channel.make_config(**self._channel_args)
        self._metadata = self._cfg.metadata
        self._channel = self._make_channel(self._cfg)
        self._stub = pb2_grpc.SgemmStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._transport: Optional[str] = None  # resolved once
        self._regions = RegionTable()
        self._scratch: Optional[SharedRegion] = None  # the kept scratch region
        self._handle_shapes: Dict[str, Tuple[int, int]] = {}  # handle -> (rows, cols)
        self.unavailable_retries = 0  # UNAVAILABLE answers retried so far
        self._own_state()

    def _own_state(self) -> None:
        """The subclass's own state, made at the end of __init__."""

    def _takes_unary(self, req: Request) -> bool:
        """MultiplyUnary for a product on one stream whose result is not kept, when what travels fits (rpc
        "auto") or always (rpc "unary"): the operands that are sent (not those named by handle), or, for
        operands in shared-memory regions (the scratch region too), the header alone, with C in the
        answer unless it goes to a region; docs/transport.md, "One product in one message"."""
        if self.rpc == "stream" or req.mode == "device" or req.keep or req.plan.stripes != 1:
            return False
        if self.rpc == "unary":
            return True  # "ring" decides as "auto" does: what auto sends as MultiplyUnary goes through the ring
        if req.mode == "stream":
            return _wire.fits_unary(req.m, req.n, req.k, req.has_c, req.skip)
        return not req.c_comes_back or 4 * req.m * req.n <= _wire.UNARY_MAX_BYTES


def uses_processes(stripe_workers: str, req: Union[Request, BatchRequest]) -> bool:
    """Whether a client with `stripe_workers` drives `req`'s stripes in worker processes (_stripe_pool.py)."""
    if not isinstance(req, Request) or req.mode != "stream" or req.plan.stripes < 2:
        return False
    if stripe_workers == "threads":
        return False
    if stripe_workers == "processes":
        return True
    return _stripe_pool.available() is None and len(os.sched_getaffinity(0)) >= AUTO_PROCESSES_MIN_CPUS


def unary_request(req: Request) -> Tuple[Receiver, bytes]:
    """A MultiplyUnary attempt's receiver and body: the stream's messages of stripe 0 joined (the same field
    numbers)."""
    receiver = req.new_receiver()
    return receiver, b"".join(req.frames(0, b"", receiver))


def unary_answer(receiver: Receiver, answer: bytes) -> Receiver:
    """The receiver fed MultiplyUnary's answer (C and the summary) and checked."""
    for msg in _wire.decode_unary_response(answer):
        receiver.on_message(msg)
    receiver.check()
    receiver.rpc = "unary"
    return receiver


class Client(ClientBase):
    """A connection to one sgemm-server.

    target: "host:port", or "unix:PATH" for the server's Unix socket (shared memory; same host only).
    token: bearer token sent with every call (servers with --auth-tokens; docs/security.md).
    tls, tls_ca, tls_cert, tls_key, tls_server_name: TLS (any of them turns it on; tls_ca None = the
      system's roots; tls_cert + tls_key: mutual TLS; tls_server_name: the name to check in the certificate).
    chunk_bytes: payload of each chunk sent (1 MiB, docs/transport.md; at most 4 MiB - 1 KiB).
    connections: connections one multiply spreads over; 0 = by size (1 below 16 MiB of payload, else 4).
    retries, backoff_s, max_backoff_s: UNAVAILABLE retried `retries` times (Retry).
    transport: "auto" (shared memory on a unix: target whose server offers it, else gRPC), "grpc", "shm".
    rpc: "auto" (a product sent as data on one connection goes through MultiplyUnary, one message each
      way, when A + B (+ C) and C each fit its limit, _wire.UNARY_MAX_BYTES), "stream" (always the Multiply
      stream), "unary" (always MultiplyUnary; a product over the limit is refused) or "ring" (what "auto"
      sends as MultiplyUnary goes through a request ring in shared memory instead of a gRPC call: unix:
      targets only; a request or answer larger than a slot's 1 MiB, or a traced one, still goes as
      MultiplyUnary; docs/transport.md, "Request rings"); summary.rpc says which.
    channel_options: extra gRPC channel arguments, (name, value) pairs.
    stripe_workers: who drives the streams of a request over several connections: "processes" (a worker
      process per stripe, started on the first such request and kept; matrices pass through shared memory),
      "threads" (a thread per stripe in this process, under its one interpreter lock), or "auto" (processes
      when this process may use at least AUTO_PROCESSES_MIN_CPUS CPUs, else threads).
    """

    def _own_state(self) -> None:
        self._lock = threading.Lock()
        self._multiply_rpcs: Dict[int, Any] = {0: self._multiply_rpc(self._channel)}  # guarded by _lock
        self._multiply_unary = self._channel.unary_unary("/sgemm.v1.Sgemm/MultiplyUnary", request_serializer=None,
                                                         response_deserializer=None)
        self._open_ring = self._channel.unary_stream("/sgemm.v1.Sgemm/OpenRing",
                                                     request_serializer=pb2.OpenRingRequest.SerializeToString,
                                                     response_deserializer=pb2.RingEvent.FromString)
        self._ring: Optional[_ring.RequestRing] = None  # guarded by _lock; opened on the first rpc "ring" product
        self._stripe_channels: List[grpc.Channel] = []  # guarded by _lock
        self._workers: Optional[_stripe_pool.StripeWorkers] = None  # guarded by _lock; made on first use
        # _transport (resolved once), _scratch (the kept scratch region) and _handle_shapes: guarded by _lock

    # ---- lifetime ----
    def close(self) -> None:
        """Closes the connections; the server drops this client's shared-memory registrations with them (the
        arrays stay valid here)."""
        with self._lock:
            channels = [self._channel, *self._stripe_channels]
            self._stripe_channels = []
            workers, self._workers = self._workers, None
            ring, self._ring = self._ring, None
        if workers is not None:
            workers.close()
        if ring is not None:
            ring.close()
            self._unregister_quietly(ring.region)
        for ch in channels:
            ch.close()

    def worker_pids(self) -> List[int]:
        """The process ids of this client's stripe workers (empty until a request has needed them)."""
        with self._lock:
            workers = self._workers
        return workers.pids() if workers is not None else []

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- server state ----
    def info(self, timeout: float = 10.0) -> pb2.GetInfoResponse:
        """The server's GetInfoResponse: version, backend, devices, kernels, precisions, limits, load."""
        return self._unary(self._stub.GetInfo, pb2.GetInfoRequest(), timeout)

    def health(self, service: str = "", timeout: float = 3.0) -> str:
        """grpc.health.v1 Check for `service` ("" = the whole server, "sgemm.v1.Sgemm"): "SERVING",
        "NOT_SERVING", ...; an unknown service raises SgemmError(NOT_FOUND)."""
        resp = self._unary(self._health.Check, health_pb2.HealthCheckRequest(service=service), timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    def serving(self, service: str = "", timeout: float = 3.0) -> bool:
        """True when the server (or `service`) reports SERVING."""
        return self.health(service, timeout) == "SERVING"

    def transport(self, timeout: float = 10.0) -> str:
        """How multiply() moves ordinary arrays here: "shm" or "grpc" (transport "auto" asks the server once)."""
        with self._lock:
            if self._transport is not None:
                return self._transport
        try:
            resolved = resolve_transport(self._want_transport, self._cfg.unix,
                                         lambda: self.info(timeout).regions_available)
        except SgemmError:
            if self._want_transport == "shm":
                raise
            return "grpc"  # not resolved (the server is not reachable yet): the request itself says so, or retries
        with self._lock:
            self._transport = resolved
        return resolved

    # ---- multiply ----
    def multiply(self, a: Matrix, b: Matrix, c: Optional[Matrix] = None, alpha: float = 1.0, beta: float = 0.0, *,
                 precision: str = "fp32", kernel: Optional[str] = None, split: Optional[str] = None,
                 timeout: Optional[float] = None, out: Optional[np.ndarray] = None, trace: bool = False,
                 keep: bool = False, keep_evictable: bool = False, send_c: bool = False,
                 connections: Optional[int] = None, op_a: str = "n", op_b: str = "n",
                 a_at: Optional[Sequence[int]] = None, b_at: Optional[Sequence[int]] = None,
                 c_at: Optional[Sequence[int]] = None) -> Tuple[Any, Summary]:
        """C = alpha*op(A)*op(B) + beta*C on the server; returns (C, summary).

        a (m x k), b (k x n), c (m x n, optional: without it C starts at zero): numpy arrays (anything numpy
        makes a 2-D real array; sent as float32), handles from put() or a kept result, or arrays in this
        client's shared-memory regions (empty(), register()), or GPU arrays on the server's host
        (`__cuda_array_interface__` or a CUDA DLPack export; all operands and `out` then: CUDA IPC,
        sgemm_client/cuda_ipc.py). op_a, op_b: BLAS's transa / transb, "n" or
        "t"; with "t" the operand given is stored transposed (a is k x m, b is n x k) and the product uses
        its transpose. A float32 array whose transpose is row-major (Fortran order, a `.T` view) is sent as
        that transpose with its op flipped: no copy. a_at, b_at, c_at: (row, col, rows, cols), with a handle:
        the operand is that block (as stored) of the resident matrix, multiplied in place. precision: "fp32"
        (error no larger than cuBLAS SGEMM's; the server runs the fastest kernel that keeps it), "fp32-ffma" (classic FFMA arithmetic only),
        "tf32" (tensor cores, about 1e-4 relative error) or "fp32x3"; kernel: None (the server's choice),
        "pingpong", "cublas"; split:
        None/"auto", "single", "rows", "k". out: an m x n float32 array C is written into (in a region: by
        the server, with no byte through gRPC); returned as C. trace: the summary carries a Chrome trace
        (summary.trace()). keep: C stays on the server and C is returned as its Handle (with send_c its
        values come back too, and the handle is summary.result_handle); keep_evictable: it may be evicted.
        connections: overrides the client's. timeout: seconds for the whole call, retries included.

        Raises ValueError for inputs that cannot be multiplied, SgemmError for what the server refuses.
        """
        t0 = time.monotonic()
        deadline = deadline_of(timeout)
        self._learn_shapes((a, b, c), deadline)
        req = Request(a, b, c, alpha, beta, precision=precision, kernel=kernel, split=split, trace=trace, keep=keep,
                      keep_evictable=keep_evictable, send_c=send_c, out=out,
                      connections=self.connections if connections is None else connections,
                      chunk_bytes=self.chunk_bytes, transport=self.transport(_timeout_within(deadline)),
                      regions=self._regions,
                      handle_shapes=self._shapes(), op_a=op_a, op_b=op_b,
                      blocks={"a": a_at, "b": b_at, "c": c_at})
        send = self._unary_call if self._takes_unary(req) else self._stream
        if req.mode == "scratch":
            receiver, attempts = self._with_retries(lambda: self._through_scratch(req, deadline, send), deadline)
        else:
            receiver, attempts = self._with_retries(lambda: send(req, deadline), deadline)
        if keep:
            with self._lock:
                self._handle_shapes[receiver.summary.result_handle] = (req.m, req.n)
        return req.finish(receiver, (time.monotonic() - t0) * 1e3, attempts)

    def multiply_batch(self, a_list: Sequence[Matrix], b_list: Sequence[Matrix],
                       c_list: Optional[Sequence[Matrix]] = None, alpha: float = 1.0, beta: float = 0.0, *,
                       precision: str = "fp32", kernel: Optional[str] = None, split: Optional[str] = None,
                       op_a: str = "n", op_b: str = "n", fail_fast: bool = False, check_finite: bool = False,
                       trace: bool = False, timeout: Optional[float] = None,
                       out: Optional[Sequence[np.ndarray]] = None
                       ) -> Tuple[List[Optional[np.ndarray]], Summary]:
        """Many products in ONE request: C_i = alpha*op(A_i)*op(B_i) + beta*C_i for every i; returns
        (list of C, summary).

        a_list, b_list (and c_list, optional): one matrix per product (numpy arrays). Either of a_list and
        b_list may instead be a handle from put(): one resident matrix every product reads, not sent (a
        strided batch: every product one shape; the cpu backend). Lists of arrays in this client's
        regions, one after another in product order (regions_of(client.empty, shapes)), are named in place:
        no operand byte crosses gRPC, and `out` (such a list, one m x n array per product) receives every C
        instead of chunks. Products of one shape go as a strided batch, others as a group; op_a, op_b,
        alpha, beta, precision and kernel apply to every product; split: None/"auto"
        (the server spreads the products over its GPUs) or "single". The list holds product i's C, or None
        when product i failed on the server (its status in summary.products[i]: code, message; e.g. with
        check_finite=True, a product whose inputs hold NaN or infinity is not computed). fail_fast=True: the
        first failing product fails the whole call (SgemmError naming it). timeout: seconds for the whole call.
        """
        t0 = time.monotonic()
        deadline = deadline_of(timeout)
        self._learn_shapes((a_list, b_list), deadline)
        req = BatchRequest(a_list, b_list, c_list, alpha, beta, precision=precision, kernel=kernel, split=split,
                           op_a=op_a, op_b=op_b, fail_fast=fail_fast, check_finite=check_finite, trace=trace,
                           chunk_bytes=self.chunk_bytes, regions=self._regions, handle_shapes=self._shapes(),
                           out=out)
        receiver, attempts = self._with_retries(lambda: self._stream(req, deadline), deadline)
        return req.finish(receiver, (time.monotonic() - t0) * 1e3, attempts)

    def _with_retries(self, once: Callable[[], T], deadline: Optional[float]) -> Tuple[T, int]:
        attempt = 0
        while True:
            try:
                return once(), attempt + 1
            except SgemmError as e:
                pause = self.retry.pause(e, attempt, deadline)
            attempt += 1
            with self._lock:
                self.unavailable_retries += 1
            time.sleep(pause)

    @staticmethod
    def _multiply_rpc(channel: grpc.Channel):
        return channel.stream_stream("/sgemm.v1.Sgemm/Multiply", request_serializer=None,
                                     response_deserializer=_wire.decode_response)

    def _stripe_rpc(self, stripe: int):
        with self._lock:
            rpc = self._multiply_rpcs.get(stripe)
            if rpc is None:
                ch = _channel.sync_channel(self._cfg, stripe)
                self._stripe_channels.append(ch)
                rpc = self._multiply_rpcs[stripe] = self._multiply_rpc(ch)
            return rpc

    def _stream_in_workers(self, req: Request, deadline: Optional[float]) -> Receiver:
        """One attempt with a worker process per stripe (_stripe_pool.py); C is the mapping they wrote."""
        with self._lock:
            if self._workers is None:
                self._workers = _stripe_pool.StripeWorkers(self._channel_args)
            workers = self._workers
        receiver = req.new_receiver()
        c = workers.run(req, receiver, deadline)
        if c is not None:
            req.result = c
        receiver.check()
        return receiver

    def _stream(self, req: Union[Request, BatchRequest], deadline: Optional[float]) -> Receiver:
        """One attempt: stripe 0 on this thread; once the server's grant comes, the other stripes, each read
        on a thread of its own. The first stripe to fail cancels the rest."""
        if uses_processes(self.stripe_workers, req):
            return self._stream_in_workers(req, deadline)
        receiver = req.new_receiver()
        lock = threading.Lock()
        calls: List[Any] = []
        errors: List[Tuple[int, SgemmError]] = []

        def fail(stripe: int, e: SgemmError) -> None:
            with lock:
                errors.append((stripe, e))
                others = list(calls) if len(errors) == 1 else []
            for call in others:
                call.cancel()

        def drain(stripe: int, call) -> None:
            try:
                for msg in call:
                    receiver.on_message(msg)
            except grpc.RpcError as e:
                fail(stripe, error_of(e))
            except SgemmError as e:
                fail(stripe, e)

        call0 = self._multiply_rpcs[0](req.frames(0, b"", receiver), timeout=remaining(deadline),
                                       metadata=self._metadata)
        with lock:
            calls.append(call0)
        threads: List[threading.Thread] = []
        try:
            for msg in call0:
                receiver.on_message(msg)
                if receiver.grant is not None and not threads and req.plan.stripes > 1:
                    for s in range(1, req.plan.stripes):
                        call = self._stripe_rpc(s)(req.frames(s, receiver.grant, receiver),
                                                   timeout=remaining(deadline), metadata=self._metadata)
                        with lock:
                            calls.append(call)
                            if errors:
                                call.cancel()
                        t = threading.Thread(target=drain, args=(s, call), daemon=True)
                        t.start()
                        threads.append(t)
        except grpc.RpcError as e:
            fail(0, error_of(e))
        except SgemmError as e:
            fail(0, e)
        for t in threads:
            t.join()
        if errors:
            raise first_failure(errors)
        if req.plan.stripes > 1 and not threads:
            raise SgemmError(grpc.StatusCode.INTERNAL, f"the server answered a request over {req.plan.stripes} "
                             "stripes without a StripeGrant (does it predate GemmHeader.stripes? use connections=1)")
        receiver.check()
        return receiver

    def _unary_call(self, req: Request, deadline: Optional[float]) -> Receiver:
        """One attempt through MultiplyUnary: the stream's messages (header, then the chunks) joined as one
        MultiplyUnaryRequest (the same field numbers); C and the summary in one answer."""
        receiver, body = unary_request(req)
        answer_bytes = 4 * req.m * req.n if req.c_comes_back else 0
        if (self.rpc == "ring" and not req.header.trace and
                max(len(body), answer_bytes + RING_SUMMARY_ROOM) <= _ring.DEFAULT_SLOT_BYTES - _ring.SLOT_HEADER_BYTES):
            answer = self._request_ring(deadline).exchange(body, deadline)
            receiver = unary_answer(receiver, answer)
            receiver.rpc = "ring"
            return receiver
        try:
            answer = self._multiply_unary(body, timeout=remaining(deadline), metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_of(e) from None
        return unary_answer(receiver, answer)

    def _request_ring(self, deadline: Optional[float]) -> "_ring.RequestRing":
        """The client's request ring, opened on first use in a region of its own (rpc "ring")."""
        with self._lock:
            if self._ring is not None:
                return self._ring
            self._need_unix()
            why_not = _ring.available()
            if why_not:
                raise SgemmError(grpc.StatusCode.FAILED_PRECONDITION, why_not)
            region = self._create_region(_ring.RequestRing.ring_bytes(), deadline)
            try:
                self._ring = _ring.RequestRing(region, self._open_ring, self._metadata)
            except BaseException:
                self._unregister_quietly(region)
                raise
            return self._ring

    def _through_scratch(self, req: Request, deadline: Optional[float],
                         send: Callable[[Request, Optional[float]], Receiver]) -> Receiver:
        """Ordinary arrays over shared memory: copied into the client's scratch region (kept for the next call;
        a call that needs more replaces it), C computed there and copied out by Request.finish. `send` is the
        call that carries the header (_stream or _unary_call)."""
        for attempt in range(2):
            with self._lock:
                region, self._scratch = self._scratch, None
            if region is not None and region.nbytes < req.scratch_bytes:
                self._unregister_quietly(region)  # too small: replaced
                region = None
            if region is None:
                region = self._create_region(req.scratch_bytes, deadline)
            try:
                req.use_scratch(region)
                receiver = send(req, deadline)
            except SgemmError as e:
                if e.code == grpc.StatusCode.NOT_FOUND and attempt == 0:
                    continue  # the connection that registered it closed: register a fresh one
                self._keep_scratch(region)
                raise
            req.copy_out_scratch()  # before the region goes back: another call may take it at once
            self._keep_scratch(region)
            return receiver
        raise AssertionError("unreachable")

    def _keep_scratch(self, region: SharedRegion) -> None:
        with self._lock:
            if self._scratch is None or self._scratch.nbytes < region.nbytes:
                self._scratch, region = region, self._scratch
        if region is not None:
            self._unregister_quietly(region)

    # ---- resident matrices ----
    def put(self, matrix: Any, *, evictable: bool = False, label: str = "",
            timeout: Optional[float] = None) -> Handle:
        """Uploads a matrix once; returns its Handle (a str), to pass wherever a matrix goes. An array in a
        shared-memory region is taken from there (no byte through gRPC). evictable: the server may drop it
        (least recently used first) when it needs room; label: shown by list()."""
        deadline = deadline_of(timeout)
        ref = self._regions.ref(matrix) if self.transport(_timeout_within(deadline)) == "shm" else None
        (rows, cols), messages = put_messages(matrix, ref, evictable, label, self.chunk_bytes // 4)
        rpc = self._channel.stream_unary("/sgemm.v1.Sgemm/PutMatrix", request_serializer=None,
                                         response_deserializer=pb2.PutMatrixResponse.FromString)
        try:
            resp = rpc(messages(), timeout=remaining(deadline), metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_of(e) from None
        with self._lock:
            self._handle_shapes[resp.handle] = (rows, cols)
        return Handle(resp.handle, (rows, cols), resp.placement)

    def delete(self, handle: str, timeout: float = 10.0) -> int:
        """Deletes a resident matrix (requests using it finish first); returns how many were using it."""
        resp = self._unary(self._stub.DeleteMatrix, pb2.DeleteMatrixRequest(handle=str(handle)), timeout)
        with self._lock:
            self._handle_shapes.pop(str(handle), None)
        return resp.requests_using

    def list(self, timeout: float = 10.0) -> pb2.ListMatricesResponse:
        """This client's resident matrices (`.matrices`, most recently used first: handle, rows, cols, bytes,
        pieces, idle_s, label, uses, ...), the budget and the bytes in use."""
        resp = self._unary(self._stub.ListMatrices, pb2.ListMatricesRequest(), timeout)
        with self._lock:
            for mi in resp.matrices:
                self._handle_shapes[mi.handle] = (mi.rows, mi.cols)
        return resp

    def _shapes(self) -> Dict[str, Tuple[int, int]]:
        with self._lock:
            return dict(self._handle_shapes)

    def _learn_shapes(self, operands: Sequence[Any], deadline: Optional[float]) -> None:
        if handles_without_shape(operands, self._shapes()):
            self.list(timeout=_timeout_within(deadline))

    # ---- shared-memory regions (the server's Unix socket) ----
    def empty(self, shape: Shape, timeout: float = 60.0) -> np.ndarray:
        """A new float32 array (zero-filled) in a shared-memory region registered with the server: multiply()
        and put() name it, and its views, in place. Needs a unix: target. The registration lives as long as
        the connection (Clients of one process share theirs to a target); the memory as long as the array."""
        shape = shape_tuple(shape)
        self._need_unix()
        region = self._create_region(int(np.prod(shape)) * 4, deadline_of(timeout))
        self._regions.add(region)
        return region.array(shape)

    def register(self, shm: Any, shape: Optional[Shape] = None, timeout: float = 60.0) -> np.ndarray:
        """Registers memory that is already shared (a multiprocessing.shared_memory.SharedMemory, or a POSIX
        shared-memory name "/name" with read and write for this user) and returns a float32 array over it
        (`shape`, default all of it, 1-D). The caller keeps ownership of the object and its name."""
        self._need_unix()
        region = SharedRegion.attach(shm)
        self._register_on_server(region, deadline_of(timeout))
        self._regions.add(region)
        return region.array(shape_tuple(shape) if shape is not None else (region.nbytes // 4,))

    def unregister(self, array: np.ndarray, timeout: float = 600.0) -> int:
        """Unregisters the region holding `array` (the server waits for requests using it); returns how many
        it waited for. The array stays valid here; multiply() then sends it like any other."""
        region = self._regions.find(array)
        if region is None:
            raise ValueError("the array is not in a region registered through this client")
        self._regions.remove(region)
        resp = self._unary(self._stub.UnregisterRegion, pb2.UnregisterRegionRequest(name=region.name), timeout)
        return resp.waited_requests

    def regions(self, timeout: float = 10.0) -> pb2.ListRegionsResponse:
        """The regions registered on the server that this caller may use."""
        return self._unary(self._stub.ListRegions, pb2.ListRegionsRequest(), timeout)

    def _need_unix(self) -> None:
        if not self._cfg.unix:
            raise SgemmError(grpc.StatusCode.FAILED_PRECONDITION, "shared-memory regions need the server's Unix "
                             "socket: connect to unix:PATH (sgemm-server --listen unix:PATH)")

    def _create_region(self, nbytes: int, deadline: Optional[float]) -> SharedRegion:
        region = SharedRegion.create(nbytes)
        try:
            self._register_on_server(region, deadline)
        finally:
            region.unlink()  # registered (both sides have it mapped) or refused: the name is not needed
        return region

    def _register_on_server(self, region: SharedRegion, deadline: Optional[float]) -> None:
        req = pb2.RegisterRegionRequest(name=region.name, shm_name=region.shm_name, byte_size=region.nbytes)
        self._unary(self._stub.RegisterRegion, req, _timeout_within(deadline, 60.0))

    def _unregister_quietly(self, region: SharedRegion) -> None:
        try:
            self._unary(self._stub.UnregisterRegion, pb2.UnregisterRegionRequest(name=region.name), 60.0)
        except SgemmError:
            pass  # the connection went, and the registration with it

    def _unary(self, method, request, timeout: Optional[float]):
        try:
            return method(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_of(e) from None


def resolve_transport(wanted: str, unix: bool, regions_available: Callable[[], bool]) -> str:
    """The transport for ordinary arrays: shared memory only on a unix: target whose server offers it."""
    if wanted == "grpc":
        return "grpc"
    if not unix:
        if wanted == "shm":
            raise SgemmError(grpc.StatusCode.FAILED_PRECONDITION, "transport shm needs the server's Unix socket: "
                             "connect to unix:PATH (sgemm-server --listen unix:PATH)")
        return "grpc"
    if regions_available():
        return "shm"
    if wanted == "shm":
        raise SgemmError(grpc.StatusCode.FAILED_PRECONDITION, "the server does not offer shared-memory regions "
                         "on this connection")
    return "grpc"


def multiply(a: Matrix, b: Matrix, c: Optional[Matrix] = None, alpha: float = 1.0, beta: float = 0.0, *,
             target: str = "localhost:50051", timeout: Optional[float] = None, **options: Any) -> Tuple[Any, Summary]:
    """One product on the server at `target`: returns (C, summary). Options go to Client (token, tls_*,
    chunk_bytes, connections, retries, ...) or to Client.multiply (precision, kernel, split, out, trace, op_a,
    op_b)."""
    call_keys = {"precision", "kernel", "split", "out", "trace", "keep", "keep_evictable", "send_c", "op_a", "op_b",
                 "a_at", "b_at", "c_at"}
    call = {k: v for k, v in options.items() if k in call_keys}
    with Client(target, **{k: v for k, v in options.items() if k not in call_keys}) as client:
        return client.multiply(a, b, c, alpha, beta, timeout=timeout, **call)
