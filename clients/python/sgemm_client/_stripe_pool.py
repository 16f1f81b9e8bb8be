"""Stripe workers: a request spread over several connections, each stripe's
stream driven by a process of its own (Client(stripe_workers="processes")).

Why processes: grpcio's blocking API copies every message into and out of
Python objects and hands each one between threads, all under the one
interpreter lock; over four connections the stripes' threads take turns on
it and the client, not the network, sets the rate
(bench/results/2026-11-27_cpu_python-connections/). A process per stripe has
a lock, a gRPC runtime and a connection of its own.

How (no matrix byte is pickled or sent through the control socket):
- Each worker is `python -m sgemm_client._stripe_worker`, started with
  subprocess (a fresh interpreter, as multiprocessing's "spawn" makes, but
  without re-running the caller's main module, so a script without an
  `if __name__ == "__main__"` guard works; nothing is ever forked with gRPC's
  threads running). It talks to the client over a Unix socket pair: small
  pickled messages and file descriptors (SCM_RIGHTS).
- The inputs go through one memfd the client keeps and reuses (its pages
  stay mapped, so later requests take no page faults): the client copies B,
  C, A into it in that order, in segments, and tells the workers how far it
  has got; each stripe sends a chunk once it is written, so the copy runs
  under the upload rather than before it.
- C comes back into a memfd that every worker keeps mapped: each writes its
  rows in place, and the array returned is a view of that mapping (no copy;
  with `out` it is copied into out). The pool keeps two such memfds and
  gives a request one the caller holds no view of (a weak reference says
  so), so `c, _ = cl.multiply(a, b)` in a loop, which holds the last C while
  the next is made, alternates between them and faults no page in again;
  when both are held a new one replaces the older, whose memory goes with
  the caller's last view. memfds have no name, so nothing can be left in
  /dev/shm.
- Workers start on the first striped request and are reused; close(), the
  client's collection and interpreter exit stop them (weakref.finalize). A
  worker sees end of file when the client dies and leaves.
- A worker that dies turns the request into WorkerError (at once: its end of
  the socket closes); one that stops answering, into DEADLINE_EXCEEDED once
  the deadline and a grace have passed. Either way the other stripes are
  cancelled, any worker not known to be idle is killed, and the next request
  starts replacements.
- Workers run with glibc's allocator told to keep freed memory
  (MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_, unless the caller's
  environment sets them): each received message is a fresh buffer, and
  without it every one faults fresh pages in.

Threads: a pool runs one request at a time (`_lock`, taken with the call's
deadline); the messages of that request are read on the calling thread.
"""

from __future__ import annotations

import mmap
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import send_handle
from typing import Any, Dict, List, Optional, Tuple

import grpc
import numpy as np

from . import _wire
from ._proto import sgemm_pb2 as pb2
from ._types import SgemmError, WorkerError

# Bytes the client copies between telling the workers how far it has got.
COPY_SEGMENT_BYTES = 8 << 20
# How long a worker may take to start (an interpreter, grpc and numpy imported), within the call's deadline.
START_TIMEOUT_S = 60.0
# After a failure, how long the other stripes have to report their cancel before they are killed; and how far
# past the call's deadline a stripe may report before it is taken as hung.
CANCEL_GRACE_S = 5.0
DEADLINE_GRACE_S = 2.0
# glibc's allocator in the workers: keep up to 256 MiB freed at the heap's top, and serve blocks below
# 32 MiB from the heap (docs/python.md, "Allocator").
ALLOCATOR_ENV = {"MALLOC_TRIM_THRESHOLD_": str(256 << 20), "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}

# C memfds a pool keeps (see above: a loop holds one C while the next is made).
C_BUFFERS = 2

_ALIGN = 64


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def available() -> Optional[str]:
    """None when worker processes can be started here, else why not."""
    if not sys.executable:
        return "no Python executable to start (sys.executable is empty: an embedded interpreter)"
    if not hasattr(os, "memfd_create"):
        return "os.memfd_create is missing (Linux only)"
    return None


@dataclass
class _CBuffer:
    """A memfd that C is written into, mapped here and by the workers (which keep it until the next one)."""

    id: int
    fd: int
    map: mmap.mmap
    nbytes: int
    view: Optional[weakref.ref] = None  # the array over it last handed out

    def held(self) -> bool:
        return self.view is not None and self.view() is not None


class _Worker:
    """One worker process and its end of the socket pair."""

    def __init__(self, stripe: int, channel_args: Dict[str, Any]):
        self.stripe = stripe
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        for key, value in ALLOCATOR_ENV.items():
            env.setdefault(key, value)
        # The worker imports this very package, wherever it was imported from.
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "sgemm_client._stripe_worker", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.conn.send(("hello", stripe, channel_args))
        self.up = False
        self.inputs_id = 0  # which inputs memfd it has mapped
        self.c_ids: set = set()  # which C memfds it has mapped
        self.job = 0  # the job it runs (0: idle)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def how_it_ended(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "closed its socket"
        return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"

    def stop(self, timeout_s: float) -> None:
        """Asks it to leave; kills it when it has not within timeout_s."""
        try:
            self.conn.send(("exit",))
        except OSError:
            pass
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self.conn.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.conn.close()


class _Pool:
    """The workers of one client (stripe s on worker s) and the inputs memfd they share. Owned by the Client;
    weakref.finalize calls close() at collection or interpreter exit."""

    def __init__(self, channel_args: Dict[str, Any]):
        self._channel_args = channel_args
        self._lock = threading.Lock()
        self._workers: List[Optional[_Worker]] = []  # guarded by _lock
        self._inputs: Optional[mmap.mmap] = None  # guarded by _lock
        self._inputs_fd = -1
        self._inputs_id = 0
        self._cs: List[_CBuffer] = []  # guarded by _lock; at most C_BUFFERS, oldest first
        self._c_ids = 0
        self._job = 0
        self._closed = False
        self.jobs_started = 0  # stripes handed to workers so far (tests wait on it)

    def pids(self) -> List[int]:
        """The workers' pids by stripe, now. Without the lock, so that it answers while a request runs (a copy
        of the list is taken at once under the interpreter lock)."""
        return [w.pid for w in list(self._workers) if w is not None]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
            for w in workers:
                if w is not None:
                    w.stop(5.0)
            self._drop_inputs()
            self._drop_c()

    def _drop_inputs(self) -> None:
        if self._inputs_fd >= 0:
            os.close(self._inputs_fd)
            self._inputs_fd = -1
        self._inputs = None  # unmapped with its last view

    def _drop_c(self) -> None:
        for buf in self._cs:
            os.close(buf.fd)  # unmapped here with the caller's last view of it
        self._cs = []

    def _c_for(self, nbytes: int) -> _CBuffer:
        """A C memfd of at least nbytes that no array handed out still views (the newest such)."""
        for buf in reversed(self._cs):
            if buf.nbytes >= nbytes and not buf.held():
                self._cs.remove(buf)
                self._cs.append(buf)
                return buf
        if len(self._cs) >= C_BUFFERS:
            old = next((b for b in self._cs if not b.held()), self._cs[0])  # a free one too small, else the oldest
            self._cs.remove(old)
            os.close(old.fd)
        fd = os.memfd_create("sgemm-stripe-c", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, nbytes)
            mapping = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._c_ids += 1
        self._cs.append(_CBuffer(self._c_ids, fd, mapping, nbytes))
        return self._cs[-1]

    # ---- one request ----
    def run(self, req, receiver, deadline: Optional[float]):
        """Runs `req` (mode "stream", plan.stripes > 1) on the workers; fills `receiver` (summary, counters)
        and returns C's array (None when no C comes back)."""
        wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._lock.acquire(timeout=-1 if wait_s is None else wait_s):
            raise SgemmError(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed while another request held "
                             "this client's stripe workers")
        try:
            if self._closed:
                raise SgemmError(grpc.StatusCode.FAILED_PRECONDITION, "the client is closed")
            self._start(req.plan.stripes, deadline)
            return self._run_locked(req, receiver, deadline)
        finally:
            self._lock.release()

    def _start(self, count: int, deadline: Optional[float]) -> None:
        """Workers 0..count-1 up (dead ones replaced)."""
        while len(self._workers) < count:
            self._workers.append(None)
        for s in range(count):
            w = self._workers[s]
            if w is not None and w.proc.poll() is not None:
                w.kill()
                w = self._workers[s] = None
            if w is None:
                self._workers[s] = _Worker(s, self._channel_args)
        give_up = time.monotonic() + START_TIMEOUT_S
        if deadline is not None:
            give_up = min(give_up, deadline)
        pending = {w.conn: w for w in self._workers[:count] if not w.up}
        while pending:
            ready = wait(list(pending), timeout=max(0.0, give_up - time.monotonic()))
            if not ready:
                for w in pending.values():
                    self._replace(w)
                raise SgemmError(grpc.StatusCode.DEADLINE_EXCEEDED, f"{len(pending)} stripe worker(s) did not "
                                 "start before the deadline")
            for conn in ready:
                w = pending.pop(conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    self._replace(w)
                    raise WorkerError(f"the worker process of stripe {w.stripe} (pid {w.pid}) {w.how_it_ended()} "
                                      "while starting (its stderr says why)") from None
                if msg[0] != "up":
                    self._replace(w)
                    raise WorkerError(f"the worker process of stripe {w.stripe} said {msg[0]!r} instead of 'up'")
                w.up = True

    def _replace(self, w: _Worker) -> None:
        """Kills `w`; the next request starts another in its place."""
        w.kill()
        if w.stripe < len(self._workers) and self._workers[w.stripe] is w:
            self._workers[w.stripe] = None

    def _inputs_for(self, nbytes: int, workers: List[_Worker]) -> mmap.mmap:
        """The inputs memfd, at least nbytes (grown when needed), mapped by every worker of this request."""
        if self._inputs is None or len(self._inputs) < nbytes:
            self._drop_inputs()
            size = max(nbytes, 1)
            fd = os.memfd_create("sgemm-stripe-inputs", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, size)
                self._inputs = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            except BaseException:
                os.close(fd)
                raise
            self._inputs_fd = fd
            self._inputs_id += 1
        for w in workers:
            if w.inputs_id != self._inputs_id:
                w.conn.send(("inputs", len(self._inputs)))
                send_handle(w.conn, self._inputs_fd, w.pid)
                w.inputs_id = self._inputs_id
        return self._inputs

    def _run_locked(self, req, receiver, deadline: Optional[float]):
        stripes = req.plan.stripes
        workers: List[_Worker] = list(self._workers[:stripes])
        m, n = req.m, req.n
        # The inputs' layout follows the order of the upload: B, then C, then A.
        order = [w for w in (_wire.MATRIX_B, _wire.MATRIX_C, _wire.MATRIX_A) if w in req.arrays and w not in req.skip]
        base: Dict[int, int] = {}
        total = 0
        for matrix in order:
            base[matrix] = total
            total = _align(total + req.arrays[matrix].size * 4)
        inputs = self._inputs_for(total, workers)
        c_elems = m * n if req.c_comes_back else 0
        c_buf = self._c_for(c_elems * 4) if c_elems else None
        self._job += 1
        job = self._job
        copied = 0
        started: List[_Worker] = []
        results: Dict[int, Dict[str, Any]] = {}
        errors: List[Tuple[int, SgemmError]] = []
        grant: Optional[bytes] = None

        def start(s: int, first: bytes) -> None:
            w = workers[s]
            ranges = [(r.matrix, r.begin, r.end) for r in req.plan.per_stripe[s]]
            spec = {"stripe": s, "first": first, "ranges": ranges,
                    "base": base, "chunk_elems": req.chunk_elems, "ready": copied, "c_elems": c_elems,
                    "c_id": c_buf.id if c_buf is not None else 0, "c_keep": [b.id for b in self._cs],
                    "c_bytes": c_buf.nbytes if c_buf is not None and c_buf.id not in w.c_ids else 0,
                    "timeout": None if deadline is None else max(0.001, deadline - time.monotonic())}
            w.conn.send(("job", job, spec))
            if spec["c_bytes"]:
                send_handle(w.conn, c_buf.fd, w.pid)
                w.c_ids.add(c_buf.id)
            w.c_ids &= set(spec["c_keep"])  # what it unmaps on reading the job
            w.job = job
            started.append(w)
            self.jobs_started += 1

        def fail(s: int, e: SgemmError) -> None:
            errors.append((s, e))
            if len(errors) == 1:
                for w in started:
                    if w.stripe not in results and w.stripe != s:
                        try:
                            w.conn.send(("cancel", job))
                        except OSError:
                            pass  # dead: its end of file says so

        def handle(w: _Worker) -> None:
            nonlocal grant
            try:
                msg = w.conn.recv()
            except (EOFError, OSError):
                self._replace(w)
                results[w.stripe] = {}
                fail(w.stripe, WorkerError(f"the worker process of stripe {w.stripe} (pid {w.pid}) "
                                           f"{w.how_it_ended()} during the request; the client starts another "
                                           "for its next request"))
                return
            tag = msg[0]
            if msg[1] != job:
                return
            if tag == "grant" and grant is None:
                grant = msg[2]
                if not errors:
                    for s in range(1, stripes):
                        start(s, pb2.MultiplyRequest(attach=pb2.StripeAttach(token=grant, stripe=s))
                              .SerializeToString())
            elif tag == "done":
                results[w.stripe] = msg[2]
                w.job = 0
            elif tag == "error":
                results[w.stripe] = {}
                w.job = 0
                fail(w.stripe, SgemmError(grpc.StatusCode[msg[2]], msg[3]))

        def pending() -> List[_Worker]:
            return [w for w in started if w.stripe not in results]

        def poll(timeout: float) -> None:
            for conn in wait([w.conn for w in pending()], timeout=timeout):
                handle(next(w for w in started if w.conn is conn))

        try:
            start(0, req.header_message())
            # Copy the inputs in segments, telling the stripes how far it has got between segments.
            flat = np.frombuffer(inputs, dtype=np.uint8, count=total)
            for matrix in order:
                if errors:
                    break
                src = req.arrays[matrix].view(np.uint8)
                for lo in range(0, src.size, COPY_SEGMENT_BYTES):
                    hi = min(lo + COPY_SEGMENT_BYTES, src.size)
                    flat[base[matrix] + lo:base[matrix] + hi] = src[lo:hi]
                    copied = base[matrix] + hi
                    if errors:
                        break
                    for w in pending():
                        try:
                            w.conn.send(("ready", job, copied))
                        except OSError:
                            pass  # dead: its end of file says so
                    poll(0)
            del flat
            copied = total
            for w in pending():
                try:
                    w.conn.send(("ready", job, copied))
                except OSError:
                    pass
            # Wait for every started stripe's end, or for a stripe that fails, or for the deadline.
            cancel_by: Optional[float] = None  # set once, when the first failure is seen
            while pending():
                if errors:
                    cancel_by = cancel_by if cancel_by is not None else time.monotonic() + CANCEL_GRACE_S
                    give_up = cancel_by if deadline is None else min(cancel_by, deadline + DEADLINE_GRACE_S)
                elif deadline is not None:
                    give_up = deadline + DEADLINE_GRACE_S
                else:
                    give_up = None
                if give_up is not None and time.monotonic() >= give_up:
                    late = pending()
                    for w in late:
                        self._replace(w)
                        results[w.stripe] = {}
                    if not errors:
                        errors.append((late[0].stripe, SgemmError(
                            grpc.StatusCode.DEADLINE_EXCEEDED, f"stripe(s) {', '.join(str(w.stripe) for w in late)} "
                            f"did not answer within {DEADLINE_GRACE_S} s past the deadline; their worker processes "
                            "were killed (the client starts others for its next request)")))
                    break
                poll(None if give_up is None else max(0.0, give_up - time.monotonic()))
        except BaseException:
            # Interrupted here (KeyboardInterrupt, a failed send): the stripes' state is unknown; start afresh.
            for w in started:
                if w.stripe not in results:
                    self._replace(w)
            raise
        if errors:
            from ._request import first_failure

            # A worker's death is the cause of what the others saw (the server aborts the request when its
            # connection drops), whichever was read first.
            died = [e for _, e in errors if isinstance(e, WorkerError)]
            raise died[0] if died else first_failure(errors)
        if stripes > 1 and grant is None:
            raise SgemmError(grpc.StatusCode.INTERNAL, f"the server answered a request over {stripes} stripes "
                             "without a StripeGrant (does it predate GemmHeader.stripes? use connections=1)")
        summaries = [r["summary"] for r in results.values() if r.get("summary")]
        if summaries:
            receiver.summary = pb2.MultiplySummary.FromString(summaries[0])
        receiver.bytes_sent = sum(r["bytes_sent"] for r in results.values())
        receiver.received = sum(r["received"] for r in results.values())
        firsts = [r["t_first_c"] for r in results.values() if r["t_first_c"] is not None]
        ends = [r["t_upload_done"] for r in results.values() if r["t_upload_done"] is not None]
        receiver.first_c_early = bool(firsts and ends and min(firsts) < max(ends))
        receiver.expected = c_elems
        if c_buf is None:
            return None
        flat = np.frombuffer(c_buf.map, dtype=np.float32, count=c_elems)
        # Every view the caller makes of C has `flat` as its base: while it lives, C is not reused.
        c_buf.view = weakref.ref(flat)
        return flat.reshape(m, n)


class StripeWorkers:
    """The Client's handle on its pool: made on the first striped request, stopped by close(), by the client's
    collection or at interpreter exit."""

    def __init__(self, channel_args: Dict[str, Any]):
        self._pool = _Pool(channel_args)
        self._finalizer = weakref.finalize(self, self._pool.close)

    def run(self, req, receiver, deadline: Optional[float]):
        return self._pool.run(req, receiver, deadline)

    def pids(self) -> List[int]:
        return self._pool.pids()

    @property
    def pool(self) -> _Pool:
        return self._pool

    def close(self) -> None:
        self._finalizer()
