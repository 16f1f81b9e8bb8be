"""A request ring of this client's (rpc "ring"; docs/transport.md, "Request rings").

MultiplyUnary's request and answer bytes through a shared-memory region the client registered, with no
gRPC call per product. The layout is common/request_ring.h's: a 64-byte header (magic, version, slots,
slot_bytes, the `doorbell` and `server_waiting` words), then `slots` slots of `slot_bytes`, each a 64-byte
header (`state`, `request_bytes`, `answer_bytes`, `status_code`, `sequence`, `caller_waiting`) and its
payload. A request takes a free slot, writes its bytes, posts the slot (and wakes the server when it
sleeps), polls the slot for its answer for `spin_s` and then sleeps on the slot's futex in short waits.
The OpenRing call stays open while the ring lives; a thread reads it and, when it ends, fails the
requests still waiting with its status.

Aligned 32-bit loads and stores through ctypes are single instructions; the order of the ring's words
rests on the x86-64 and AArch64 rules for them plus the futex calls' barriers, and every wait is short
(at most 2 ms at a time) so that a wake lost between the two sides costs at most that.
"""

import ctypes
import ctypes.util
import os
import platform
import struct
import threading
import time
from typing import List, Optional

import grpc

from ._proto import sgemm_pb2 as pb2
from ._types import SgemmError
from .regions import SharedRegion

MAGIC = 0x52474753
VERSION = 1
HEADER_BYTES = 64
SLOT_HEADER_BYTES = 64
FREE, POSTED, TAKEN, ANSWERED = 0, 1, 2, 3
DEFAULT_SLOTS = 4
DEFAULT_SLOT_BYTES = (1 << 20) + SLOT_HEADER_BYTES  # 1 MiB of payload, as the C++ client's

# Offsets of the words, as common/request_ring.h lays them out.
_DOORBELL, _SERVER_WAITING = 24, 28
_STATE, _REQUEST_BYTES, _ANSWER_BYTES, _STATUS_CODE, _CALLER_WAITING = 0, 4, 8, 12, 24

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _futex_wait(address: int, expected: int, timeout_s: float) -> None:
    ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
    _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAIT, ctypes.c_uint32(expected), ctypes.byref(ts),
                  None, 0)


def _futex_wake(address: int) -> None:
    _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)


def available() -> Optional[str]:
    """None when this machine can drive a ring, else why not."""
    if _SYS_FUTEX is None:
        return f"request rings need Linux on x86-64 or AArch64, not {platform.machine()}"
    return None


class RequestRing:
    """An open ring in `region` (ring_bytes(slots, slot_bytes) of it, registered on the server)."""

    def __init__(self, region: SharedRegion, open_ring, metadata, slots: int = DEFAULT_SLOTS,
                 slot_bytes: int = DEFAULT_SLOT_BYTES, spin_s: float = 0.001):
        """Formats the ring, calls OpenRing (`open_ring`: the channel's unary_stream callable) and waits for
        the server's first message. Raises SgemmError with the server's status when it refuses."""
        self.region = region
        self.slots = slots
        self.slot_bytes = slot_bytes
        self.capacity = slot_bytes - SLOT_HEADER_BYTES
        self.spin_s = spin_s
        self._base = region.address
        self._format()
        self._lock = threading.Condition()
        self._free: List[int] = list(range(slots - 1, -1, -1))  # guarded by _lock
        self._abandoned = [False] * slots  # guarded by _lock: slots whose request gave up before the answer
        self._closed: Optional[SgemmError] = None  # guarded by _lock: the ring's end
        request = pb2.OpenRingRequest(region=region.name, offset=0, slots=slots, slot_bytes=slot_bytes)
        self._call = open_ring(request, metadata=metadata)
        try:
            first = next(self._call)
        except grpc.RpcError as e:
            raise SgemmError(e.code(), e.details() or "") from None
        except StopIteration:
            raise SgemmError(grpc.StatusCode.UNAVAILABLE, "the server closed the request ring before opening it") \
                from None
        if not first.opened:
            self._call.cancel()
            raise SgemmError(grpc.StatusCode.INTERNAL, "the server's first ring event does not open it")
        self._watcher = threading.Thread(target=self._watch, name="sgemm-ring", daemon=True)
        self._watcher.start()

    @staticmethod
    def ring_bytes(slots: int = DEFAULT_SLOTS, slot_bytes: int = DEFAULT_SLOT_BYTES) -> int:
        return HEADER_BYTES + slots * slot_bytes

    # ---- the words ----
    def _u32(self, offset: int) -> ctypes.c_uint32:
        return ctypes.c_uint32.from_address(self._base + offset)

    def _slot(self, i: int) -> int:
        return HEADER_BYTES + i * self.slot_bytes

    def _format(self) -> None:
        ctypes.memset(self._base, 0, HEADER_BYTES)
        ctypes.memmove(self._base, struct.pack("<IIIIQ", MAGIC, VERSION, self.slots, 0, self.slot_bytes), 24)
        for i in range(self.slots):
            ctypes.memset(self._base + self._slot(i), 0, SLOT_HEADER_BYTES)

    # ---- lifetime ----
    def close(self) -> None:
        """Cancels OpenRing and waits for the ring's thread; the server then lets go of the region."""
        self._call.cancel()
        self._watcher.join()

    def _watch(self) -> None:
        try:
            for _ in self._call:
                pass
            closed = SgemmError(grpc.StatusCode.UNAVAILABLE, "the server closed the request ring")
        except grpc.RpcError as e:
            code = e.code()
            closed = SgemmError(grpc.StatusCode.UNAVAILABLE if code == grpc.StatusCode.CANCELLED else code,
                                e.details() or "the request ring closed")
        with self._lock:
            self._closed = closed
            self._lock.notify_all()
        for i in range(self.slots):
            _futex_wake(self._base + self._slot(i) + _STATE)

    # ---- one request ----
    def _take_slot(self, deadline: Optional[float]) -> int:
        with self._lock:
            while True:
                if self._closed is not None:
                    raise self._closed
                for i, gave_up in enumerate(self._abandoned):  # free again once the server answered
                    if gave_up and self._u32(self._slot(i) + _STATE).value == ANSWERED:
                        self._abandoned[i] = False
                        self._u32(self._slot(i) + _STATE).value = FREE
                        self._free.append(i)
                if self._free:
                    return self._free.pop()
                wait = 0.001 if deadline is None else min(0.001, deadline - time.monotonic())
                if wait <= 0:
                    raise SgemmError(grpc.StatusCode.DEADLINE_EXCEEDED, "no free slot in the request ring before "
                                     "the deadline")
                self._lock.wait(wait)

    def exchange(self, body: bytes, deadline: Optional[float]) -> bytes:
        """Posts `body` (a MultiplyUnaryRequest's bytes) and returns the MultiplyUnaryResponse's bytes, or
        raises SgemmError with the server's status for it (or the ring's end, or DEADLINE_EXCEEDED)."""
        if len(body) > self.capacity:
            raise SgemmError(grpc.StatusCode.INVALID_ARGUMENT, f"the request ({len(body)} bytes) exceeds the "
                             f"request ring's slot payload of {self.capacity} bytes")
        i = self._take_slot(deadline)
        slot = self._base + self._slot(i)
        ctypes.memmove(slot + SLOT_HEADER_BYTES, body, len(body))
        self._u32(self._slot(i) + _REQUEST_BYTES).value = len(body)
        self._u32(self._slot(i) + _CALLER_WAITING).value = 0
        state = self._u32(self._slot(i) + _STATE)
        state.value = POSTED
        doorbell = self._u32(_DOORBELL)
        doorbell.value = (doorbell.value + 1) & 0xFFFFFFFF  # only this process posts to its ring
        if self._u32(_SERVER_WAITING).value:
            _futex_wake(self._base + _DOORBELL)
        spin_until = time.monotonic() + self.spin_s
        while state.value != ANSWERED and time.monotonic() < spin_until:
            os.sched_yield()
        waiting = self._u32(self._slot(i) + _CALLER_WAITING)
        while state.value != ANSWERED:
            with self._lock:
                closed = self._closed
            if closed is not None or (deadline is not None and time.monotonic() >= deadline):
                with self._lock:
                    self._abandoned[i] = True  # the server may still answer it
                raise closed or SgemmError(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer from the request ring "
                                           "before the deadline")
            waiting.value = 1
            seen = state.value
            if seen != ANSWERED:
                _futex_wait(slot + _STATE, seen, 0.002)
            waiting.value = 0
        code = ctypes.c_int32.from_address(slot + _STATUS_CODE).value
        n = min(self._u32(self._slot(i) + _ANSWER_BYTES).value, self.capacity)
        answer = ctypes.string_at(slot + SLOT_HEADER_BYTES, n)
        state.value = FREE
        with self._lock:
            self._free.append(i)
            self._lock.notify()
        if code != 0:
            raise SgemmError(_status_code(code), answer.decode("utf-8", "replace"))
        return answer


def _status_code(value: int) -> grpc.StatusCode:
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code
    return grpc.StatusCode.UNKNOWN
