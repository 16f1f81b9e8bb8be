"""A stripe worker: one process that drives one stripe's Multiply stream for
the blocking client when it spreads a request over several connections with
stripe_workers="processes" (_stripe_pool.py starts it and says why).

    python -m sgemm_client._stripe_worker FD

FD is this process's end of a Unix socket pair with the client; over it come
small pickled messages and file descriptors, never a matrix byte:

| from the client                     | meaning |
|-------------------------------------|---------|
| ("hello", stripe, channel_args)     | first: the channel to open (make_config's arguments) |
| ("inputs", size) + an fd            | a memfd holding the inputs (B, C, A), mapped here until the next one |
| ("job", id, spec) [+ an fd]         | run one stripe; the fd (when spec["c_bytes"]) is a new memfd for C |
| ("ready", id, nbytes)               | the first nbytes of the inputs are written: chunks below it may go |
| ("cancel", id)                      | cancel that job's call |
| ("exit",)                           | leave |

| to the client                       | meaning |
|-------------------------------------|---------|
| ("up", pid)                         | the channel is made |
| ("grant", id, token)                | stripe 0 read the server's StripeGrant |
| ("done", id, figures)               | the stream ended OK: summary (bytes or None), bytes sent, C received, times |
| ("error", id, code name, details)   | the stream failed |

End of file on the socket means the client is gone: the worker leaves at
once, whatever it was doing, so a killed client leaves no process behind.
SIGINT is ignored (the client's Ctrl-C is the client's to handle).

Threads: the main thread runs jobs one at a time (the call and its
responses); a reader thread takes the client's messages; gRPC's own thread
takes the request's messages from `_frames`, which waits for "ready".
"""

from __future__ import annotations

import mmap
import os
import queue
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle
from typing import Any, Dict, Iterator, Optional

import grpc
import numpy as np

from . import _channel, _wire


class _Job:
    """One stripe of one request, as the client described it; `ready` and `cancelled` are set by the reader
    thread, under `cond`."""

    def __init__(self, job_id: int, spec: Dict[str, Any]):
        self.id = job_id
        self.spec = spec
        self.cond = threading.Condition()
        self.ready = spec["ready"]  # guarded by cond
        self.cancelled = False  # guarded by cond
        self.call: Any = None  # set before the first response is read
        self.bytes_sent = 0
        self.t_upload_done: Optional[float] = None


class Worker:
    def __init__(self, conn: Connection):
        self.conn = conn
        self.jobs: "queue.Queue[Optional[_Job]]" = queue.Queue()
        # The inputs and C memfds, mapped until the client sends others; replaced only between jobs (the client
        # waits for each job's end before the next).
        self.inputs: Optional[mmap.mmap] = None
        self.c_maps: Dict[int, mmap.mmap] = {}  # C memfds by id: those the client keeps (spec["c_keep"])
        self.lock = threading.Lock()
        self.current: Optional[_Job] = None  # guarded by lock

    def serve(self) -> None:
        tag, stripe, channel_args = self.conn.recv()
        assert tag == "hello", tag
        cfg = _channel.make_config(**channel_args)
        self.metadata = cfg.metadata
        channel = _channel.sync_channel(cfg, stripe)
        self.rpc = channel.stream_stream("/sgemm.v1.Sgemm/Multiply", request_serializer=None,
                                         response_deserializer=_wire.decode_response)
        threading.Thread(target=self._read_messages, daemon=True).start()
        self.conn.send(("up", os.getpid()))
        while True:
            job = self.jobs.get()
            if job is None:
                break
            result = self._run(job)
            with self.lock:
                # Before the result goes: once the client has it, the next job's messages may follow at once.
                if self.current is job:
                    self.current = None
            self.conn.send(result)
        channel.close()

    def _read_messages(self) -> None:
        """The client's messages; end of file (the client died) ends the process."""
        try:
            while True:
                msg = self.conn.recv()
                tag = msg[0]
                if tag == "inputs":
                    fd = recv_handle(self.conn)
                    try:
                        self.inputs = mmap.mmap(fd, msg[1], mmap.MAP_SHARED, mmap.PROT_READ)
                    finally:
                        os.close(fd)
                elif tag == "job":
                    spec = msg[2]
                    if spec["c_bytes"]:
                        fd = recv_handle(self.conn)
                        try:
                            self.c_maps[spec["c_id"]] = mmap.mmap(fd, spec["c_bytes"], mmap.MAP_SHARED,
                                                                  mmap.PROT_READ | mmap.PROT_WRITE)
                        finally:
                            os.close(fd)
                    for gone in set(self.c_maps) - set(spec["c_keep"]):
                        del self.c_maps[gone]  # unmapped: the client dropped it
                    job = _Job(msg[1], spec)
                    with self.lock:
                        self.current = job
                    self.jobs.put(job)
                elif tag in ("ready", "cancel"):
                    with self.lock:
                        job = self.current if self.current is not None and self.current.id == msg[1] else None
                    if job is not None:
                        with job.cond:
                            if tag == "ready":
                                job.ready = max(job.ready, msg[2])
                            else:
                                job.cancelled = True
                            job.cond.notify_all()
                        if tag == "cancel" and job.call is not None:
                            job.call.cancel()
                elif tag == "exit":
                    self.jobs.put(None)
                    return
        except (EOFError, OSError):
            os._exit(0)  # the client is gone: nothing here is worth finishing

    def _frames(self, job: _Job) -> Iterator[bytes]:
        """The stripe's messages: its first (the header or the attach), then its chunks from the inputs, each
        once the client has written it."""
        spec = job.spec
        yield spec["first"]
        view = memoryview(self.inputs) if self.inputs is not None else None
        try:
            for matrix, begin, end in spec["ranges"]:
                base = spec["base"][matrix]
                for off in range(begin, end, spec["chunk_elems"]):
                    stop = min(off + spec["chunk_elems"], end)
                    need = base + stop * 4
                    with job.cond:
                        while job.ready < need and not job.cancelled:
                            job.cond.wait()
                        if job.cancelled:
                            return
                    # Counted as it is handed to gRPC: code after the last yield runs only when gRPC asks
                    # for another message, which may come after the response has ended.
                    job.bytes_sent += (stop - off) * 4
                    yield _wire.chunk_frame(matrix, off, view[base + off * 4:base + stop * 4])
        finally:
            if view is not None:
                view.release()
        job.t_upload_done = time.monotonic()

    def _run(self, job: _Job):
        spec = job.spec
        c = np.frombuffer(self.c_maps[spec["c_id"]], dtype=_wire.FP32, count=spec["c_elems"]) if spec["c_elems"] \
            else None
        summary: Optional[bytes] = None
        received = 0
        t_first_c: Optional[float] = None
        try:
            call = self.rpc(self._frames(job), timeout=spec["timeout"], metadata=self.metadata)
            job.call = call
            with job.cond:
                if job.cancelled:
                    call.cancel()
            for msg in call:
                if isinstance(msg, _wire.CChunk):
                    if c is None or msg.matrix != _wire.MATRIX_C or msg.offset + msg.count > c.size:
                        call.cancel()
                        return ("error", job.id, "INTERNAL", f"the server sent a chunk outside C: matrix "
                                f"{msg.matrix}, offset {msg.offset}, {msg.count} values")
                    c[msg.offset:msg.offset + msg.count] = msg.values()
                    if t_first_c is None:
                        t_first_c = time.monotonic()
                    received += msg.count
                    continue
                kind = msg.WhichOneof("kind")
                if kind == "summary":
                    summary = msg.summary.SerializeToString()
                elif kind == "stripe_grant":
                    self.conn.send(("grant", job.id, msg.stripe_grant.token))
        except grpc.RpcError as e:
            return ("error", job.id, e.code().name, e.details() or "")
        except Exception as e:  # noqa: BLE001 - reported to the client, which raises it
            return ("error", job.id, "INTERNAL", f"stripe {spec['stripe']} worker: {e!r}")
        finally:
            del c  # the mapping itself is kept for the next job
        return ("done", job.id, {"summary": summary, "bytes_sent": job.bytes_sent, "received": received,
                                 "t_first_c": t_first_c, "t_upload_done": job.t_upload_done})


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    Worker(Connection(int(sys.argv[1]))).serve()


if __name__ == "__main__":
    main()
