"""sgemm_client.aio.Client: the asyncio client (grpc.aio), beside the blocking one.

    async with sgemm_client.aio.Client("host:50051") as cl:
        c, summary = await cl.multiply(a, b)

The same requests as sgemm_client.Client (sgemm_client/_request.py decides
what each sends and expects; this module only drives it), the same options,
errors, retries and deadlines; every method that talks to the server is a
coroutine. Stripes of a large request run as tasks on the caller's loop, or in
the client's stripe worker processes (stripe_workers, as for the blocking
client), awaited through the loop's default executor.

Threads: one event loop. A Client belongs to the loop it was first used on
(grpc.aio's rule for channels).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

import grpc
import numpy as np

from . import _channel, _stripe_pool, _wire
from ._proto import health_pb2
from ._proto import sgemm_pb2 as pb2
from ._batch import BatchRequest
from ._request import Matrix, Receiver, Request, first_failure, handles_without_shape, put_messages
from ._types import Handle, SgemmError, Summary, error_of
from .client import (ClientBase, Shape, _timeout_within, deadline_of, remaining, resolve_transport, shape_tuple,
                     unary_answer, unary_request, uses_processes)
from .regions import SharedRegion

__all__ = ["Client"]


class Client(ClientBase):
    """See sgemm_client.Client: the same arguments and methods, as coroutines (empty() and register() too,
    since they register with the server)."""

    _make_channel = staticmethod(_channel.aio_channel)
    # No "ring": a coroutine cannot wait on the ring's futex, and polling it from a thread would add the
    # hand-off the ring exists to avoid.
    rpcs = ("auto", "stream", "unary")

    def _own_state(self) -> None:
        self._stripe_channels: Dict[int, Any] = {}
        # The stripe worker processes (stripe_workers, _stripe_pool.py), made on first use; a request on them
        # waits in a thread of the event loop's executor, as the pool's calls block.
        self._workers: Optional[_stripe_pool.StripeWorkers] = None
        self._multiply_unary = self._channel.unary_unary("/sgemm.v1.Sgemm/MultiplyUnary", request_serializer=None,
                                                         response_deserializer=None)

    async def close(self) -> None:
        channels = [self._channel, *self._stripe_channels.values()]
        self._stripe_channels = {}
        workers, self._workers = self._workers, None
        if workers is not None:
            await asyncio.get_running_loop().run_in_executor(None, workers.close)
        for ch in channels:
            await ch.close()

    def worker_pids(self) -> List[int]:
        """The process ids of this client's stripe workers (empty until a request has needed them)."""
        return self._workers.pids() if self._workers is not None else []

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def info(self, timeout: float = 10.0) -> pb2.GetInfoResponse:
        return await self._unary(self._stub.GetInfo, pb2.GetInfoRequest(), timeout)

    async def health(self, service: str = "", timeout: float = 3.0) -> str:
        resp = await self._unary(self._health.Check, health_pb2.HealthCheckRequest(service=service), timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    async def serving(self, service: str = "", timeout: float = 3.0) -> bool:
        return await self.health(service, timeout) == "SERVING"

    async def transport(self, timeout: float = 10.0) -> str:
        if self._transport is None:
            available = False
            if self._cfg.unix and self._want_transport != "grpc":
                try:
                    available = (await self.info(timeout)).regions_available
                except SgemmError:
                    if self._want_transport == "shm":
                        raise
                    return "grpc"  # not resolved (the server is not reachable yet): the request says so
            self._transport = resolve_transport(self._want_transport, self._cfg.unix, lambda: available)
        return self._transport

    async def multiply(self, a: Matrix, b: Matrix, c: Optional[Matrix] = None, alpha: float = 1.0,
                       beta: float = 0.0, *, precision: str = "fp32", kernel: Optional[str] = None,
                       split: Optional[str] = None, timeout: Optional[float] = None, out: Optional[np.ndarray] = None,
                       trace: bool = False, keep: bool = False, keep_evictable: bool = False, send_c: bool = False,
                       connections: Optional[int] = None, op_a: str = "n", op_b: str = "n",
                       a_at: Optional[Sequence[int]] = None, b_at: Optional[Sequence[int]] = None,
                       c_at: Optional[Sequence[int]] = None) -> Tuple[Any, Summary]:
        """C = alpha*op(A)*op(B) + beta*C; returns (C, summary). See sgemm_client.Client.multiply."""
        t0 = time.monotonic()
        deadline = deadline_of(timeout)
        if handles_without_shape((a, b, c), self._handle_shapes):
            await self.list(timeout=_timeout_within(deadline))
        req = Request(a, b, c, alpha, beta, precision=precision, kernel=kernel, split=split, trace=trace, keep=keep,
                      keep_evictable=keep_evictable, send_c=send_c, out=out,
                      connections=self.connections if connections is None else connections,
                      chunk_bytes=self.chunk_bytes, transport=await self.transport(_timeout_within(deadline)),
                      regions=self._regions,
                      handle_shapes=dict(self._handle_shapes), op_a=op_a, op_b=op_b,
                      blocks={"a": a_at, "b": b_at, "c": c_at})
        send = self._unary_call if self._takes_unary(req) else self._stream
        if req.mode == "scratch":
            receiver, attempts = await self._with_retries(lambda: self._through_scratch(req, deadline, send), deadline)
        else:
            receiver, attempts = await self._with_retries(lambda: send(req, deadline), deadline)
        if keep:
            self._handle_shapes[receiver.summary.result_handle] = (req.m, req.n)
        return req.finish(receiver, (time.monotonic() - t0) * 1e3, attempts)

    async def multiply_batch(self, a_list: Sequence[Matrix], b_list: Sequence[Matrix],
                             c_list: Optional[Sequence[Matrix]] = None, alpha: float = 1.0, beta: float = 0.0, *,
                             precision: str = "fp32", kernel: Optional[str] = None, split: Optional[str] = None,
                             op_a: str = "n", op_b: str = "n", fail_fast: bool = False, check_finite: bool = False,
                             trace: bool = False, timeout: Optional[float] = None,
                             out: Optional[Sequence[np.ndarray]] = None
                             ) -> Tuple[List[Optional[np.ndarray]], Summary]:
        """Many products in one request; returns (list of C, summary). See sgemm_client.Client.multiply_batch."""
        t0 = time.monotonic()
        deadline = deadline_of(timeout)
        if handles_without_shape((a_list, b_list), self._handle_shapes):
            await self.list(timeout=_timeout_within(deadline))
        req = BatchRequest(a_list, b_list, c_list, alpha, beta, precision=precision, kernel=kernel, split=split,
                           op_a=op_a, op_b=op_b, fail_fast=fail_fast, check_finite=check_finite, trace=trace,
                           chunk_bytes=self.chunk_bytes, regions=self._regions,
                           handle_shapes=dict(self._handle_shapes), out=out)
        receiver, attempts = await self._with_retries(lambda: self._stream(req, deadline), deadline)
        return req.finish(receiver, (time.monotonic() - t0) * 1e3, attempts)

    async def _with_retries(self, once: Callable[[], Awaitable[Receiver]],
                            deadline: Optional[float]) -> Tuple[Receiver, int]:
        """`once()` awaited until it succeeds or the retry policy gives up (sgemm_client.Client._with_retries);
        the receiver and the number of attempts."""
        attempt = 0
        while True:
            try:
                return await once(), attempt + 1
            except SgemmError as e:
                pause = self.retry.pause(e, attempt, deadline)
            attempt += 1
            self.unavailable_retries += 1
            await asyncio.sleep(pause)

    def _multiply_rpc(self, stripe: int):
        if stripe == 0:
            ch = self._channel
        else:
            ch = self._stripe_channels.get(stripe)
            if ch is None:
                ch = self._stripe_channels[stripe] = _channel.aio_channel(self._cfg, stripe)
        return ch.stream_stream("/sgemm.v1.Sgemm/Multiply", request_serializer=None,
                                response_deserializer=_wire.decode_response)

    async def _stream_in_workers(self, req: Request, deadline: Optional[float]) -> Receiver:
        """One attempt with a worker process per stripe; C is the mapping they wrote. A cancelled caller stops
        waiting; the request itself runs on to its end or its deadline."""
        if self._workers is None:
            self._workers = _stripe_pool.StripeWorkers(self._channel_args)
        receiver = req.new_receiver()
        c = await asyncio.get_running_loop().run_in_executor(None, self._workers.run, req, receiver, deadline)
        if c is not None:
            req.result = c
        receiver.check()
        return receiver

    async def _stream(self, req: Request, deadline: Optional[float]) -> Receiver:
        """One attempt: each stripe's stream read by a task; stripes 1.. start once stripe 0 has the grant.
        The first stripe to fail cancels the others. Stripes in worker processes where stripe_workers says."""
        if uses_processes(self.stripe_workers, req):
            return await self._stream_in_workers(req, deadline)
        receiver = req.new_receiver()
        calls: List[Any] = []
        errors: List[Tuple[int, SgemmError]] = []

        def fail(stripe: int, e: SgemmError) -> None:
            errors.append((stripe, e))
            if len(errors) == 1:
                for call in calls:
                    call.cancel()

        async def drain(stripe: int, call) -> None:
            try:
                async for msg in call:
                    receiver.on_message(msg)
                    if stripe == 0 and receiver.grant is not None and len(calls) == 1 and req.plan.stripes > 1:
                        start_others()
                code = await call.code()
                if code != grpc.StatusCode.OK:
                    fail(stripe, SgemmError(code, await call.details() or ""))
            except grpc.RpcError as e:
                fail(stripe, error_of(e))
            except asyncio.CancelledError:
                fail(stripe, SgemmError(grpc.StatusCode.CANCELLED, f"stripe {stripe} was cancelled"))
            except SgemmError as e:
                fail(stripe, e)

        tasks: List[asyncio.Task] = []

        def start_others() -> None:
            for s in range(1, req.plan.stripes):
                call = self._multiply_rpc(s)(iter(req.frames(s, receiver.grant, receiver)),
                                             timeout=remaining(deadline), metadata=self._metadata)
                calls.append(call)
                if errors:
                    call.cancel()
                tasks.append(asyncio.ensure_future(drain(s, call)))

        call0 = self._multiply_rpc(0)(iter(req.frames(0, b"", receiver)), timeout=remaining(deadline),
                                      metadata=self._metadata)
        calls.append(call0)
        await drain(0, call0)
        while tasks:
            done = list(tasks)
            tasks.clear()
            await asyncio.gather(*done)
        if errors:
            raise first_failure(errors)
        if req.plan.stripes > 1 and len(calls) == 1:
            raise SgemmError(grpc.StatusCode.INTERNAL, f"the server answered a request over {req.plan.stripes} "
                             "stripes without a StripeGrant (does it predate GemmHeader.stripes? use connections=1)")
        receiver.check()
        return receiver

    async def _unary_call(self, req: Request, deadline: Optional[float]) -> Receiver:
        """One attempt through MultiplyUnary (sgemm_client.Client._unary_call)."""
        receiver, body = unary_request(req)
        try:
            answer = await self._multiply_unary(body, timeout=remaining(deadline), metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_of(e) from None
        return unary_answer(receiver, answer)

    async def _through_scratch(self, req: Request, deadline: Optional[float],
                               send: Callable[[Request, Optional[float]], Awaitable[Receiver]]) -> Receiver:
        for attempt in range(2):
            region, self._scratch = self._scratch, None
            if region is not None and region.nbytes < req.scratch_bytes:
                await self._unregister_quietly(region)  # too small: replaced
                region = None
            if region is None:
                region = await self._create_region(req.scratch_bytes, deadline)
            try:
                req.use_scratch(region)
                receiver = await send(req, deadline)
            except SgemmError as e:
                if e.code == grpc.StatusCode.NOT_FOUND and attempt == 0:
                    continue  # the connection that registered it closed: register a fresh one
                await self._keep_scratch(region)
                raise
            req.copy_out_scratch()  # before the region goes back: another call may take it at once
            await self._keep_scratch(region)
            return receiver
        raise AssertionError("unreachable")

    async def _keep_scratch(self, region: SharedRegion) -> None:
        if self._scratch is None or self._scratch.nbytes < region.nbytes:
            self._scratch, region = region, self._scratch
        if region is not None:
            await self._unregister_quietly(region)

    async def _unregister_quietly(self, region: SharedRegion) -> None:
        try:
            await self._unary(self._stub.UnregisterRegion, pb2.UnregisterRegionRequest(name=region.name), 60.0)
        except SgemmError:
            pass  # the connection went, and the registration with it

    async def put(self, matrix: Any, *, evictable: bool = False, label: str = "",
                  timeout: Optional[float] = None) -> Handle:
        deadline = deadline_of(timeout)
        ref = self._regions.ref(matrix) if await self.transport(_timeout_within(deadline)) == "shm" else None
        (rows, cols), frames = put_messages(matrix, ref, evictable, label, self.chunk_bytes // 4)
        rpc = self._channel.stream_unary("/sgemm.v1.Sgemm/PutMatrix", request_serializer=None,
                                         response_deserializer=pb2.PutMatrixResponse.FromString)
        try:
            resp = await rpc(frames(), timeout=remaining(deadline), metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_of(e) from None
        self._handle_shapes[resp.handle] = (rows, cols)
        return Handle(resp.handle, (rows, cols), resp.placement)

    async def delete(self, handle: str, timeout: float = 10.0) -> int:
        resp = await self._unary(self._stub.DeleteMatrix, pb2.DeleteMatrixRequest(handle=str(handle)), timeout)
        self._handle_shapes.pop(str(handle), None)
        return resp.requests_using

    async def list(self, timeout: float = 10.0) -> pb2.ListMatricesResponse:
        resp = await self._unary(self._stub.ListMatrices, pb2.ListMatricesRequest(), timeout)
        for mi in resp.matrices:
            self._handle_shapes[mi.handle] = (mi.rows, mi.cols)
        return resp

    async def empty(self, shape: Shape, timeout: float = 60.0) -> np.ndarray:
        shape = shape_tuple(shape)
        self._need_unix()
        region = await self._create_region(int(np.prod(shape)) * 4, deadline_of(timeout))
        self._regions.add(region)
        return region.array(shape)

    async def register(self, shm: Any, shape: Optional[Shape] = None, timeout: float = 60.0) -> np.ndarray:
        self._need_unix()
        region = SharedRegion.attach(shm)
        await self._register_on_server(region, deadline_of(timeout))
        self._regions.add(region)
        return region.array(shape_tuple(shape) if shape is not None else (region.nbytes // 4,))

    async def unregister(self, array: np.ndarray, timeout: float = 600.0) -> int:
        region = self._regions.find(array)
        if region is None:
            raise ValueError("the array is not in a region registered through this client")
        self._regions.remove(region)
        resp = await self._unary(self._stub.UnregisterRegion, pb2.UnregisterRegionRequest(name=region.name),
                                 timeout)
        return resp.waited_requests

    async def regions(self, timeout: float = 10.0) -> pb2.ListRegionsResponse:
        return await self._unary(self._stub.ListRegions, pb2.ListRegionsRequest(), timeout)

    def _need_unix(self) -> None:
        if not self._cfg.unix:
            raise SgemmError(grpc.StatusCode.FAILED_PRECONDITION, "shared-memory regions need the server's Unix "
                             "socket: connect to unix:PATH (sgemm-server --listen unix:PATH)")

    async def _create_region(self, nbytes: int, deadline: Optional[float]) -> SharedRegion:
        region = SharedRegion.create(nbytes)
        try:
            await self._register_on_server(region, deadline)
        finally:
            region.unlink()
        return region

    async def _register_on_server(self, region: SharedRegion, deadline: Optional[float]) -> None:
        req = pb2.RegisterRegionRequest(name=region.name, shm_name=region.shm_name, byte_size=region.nbytes)
        await self._unary(self._stub.RegisterRegion, req, _timeout_within(deadline, 60.0))

    async def _unary(self, method, request, timeout: Optional[float]):
        try:
            return await method(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_of(e) from None
