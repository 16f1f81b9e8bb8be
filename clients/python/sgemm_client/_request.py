"""One Multiply request, apart from how it travels: its operands checked and
resolved (arrays, resident handles, arrays in shared-memory regions), its
header, what each stripe sends, and what comes back. The blocking client
(client.py) and the asyncio one (aio.py) drive it; neither decides anything
about the request itself.

How the matrices go (one row each of a small table, chosen in `Request.__init__`):

| mode       | when                                                         | matrix bytes on gRPC |
|------------|--------------------------------------------------------------|----------------------|
| `regions`  | shared memory is the transport and A, B (and C) lie in regions | none (C too with `out` in a region) |
| `scratch`  | shared memory is the transport, some operand is ordinary memory | none: copied into the client's kept scratch region and back |
| `stream`   | TCP (or transport "grpc"), or an operand is a resident handle, or keep | B (and C), then A, in chunks, over 1 or more stripes |
| `device`   | an operand is a GPU array (`__cuda_array_interface__`): A, B (and C) all are | none (C too with `out` a GPU array): CUDA IPC, cuda_ipc.py |

Threads: a Request belongs to one call. Its Receiver may be fed by several
stripe threads at once (disjoint rows of C); its counters are guarded by a lock.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from . import _wire, cuda_ipc
from ._proto import sgemm_pb2 as pb2
from ._types import Handle, SgemmError
from .regions import RegionTable, SharedRegion

PRECISIONS = {"fp32": pb2.PRECISION_UNSPECIFIED, "fp32-ffma": pb2.PRECISION_FP32_FFMA, "tf32": pb2.PRECISION_TF32,
              "fp32x3": pb2.PRECISION_FP32X3}
KERNELS = {None: pb2.KERNEL_UNSPECIFIED, "pingpong": pb2.KERNEL_PINGPONG, "cublas": pb2.KERNEL_CUBLAS}
SPLITS = {None: pb2.SPLIT_UNSPECIFIED, "auto": pb2.SPLIT_UNSPECIFIED, "single": pb2.SPLIT_SINGLE,
          "rows": pb2.SPLIT_ROWS, "k": pb2.SPLIT_K}
_NAMES = {_wire.MATRIX_A: "a", _wire.MATRIX_B: "b", _wire.MATRIX_C: "c"}
OPS = {"n": pb2.OP_N, "t": pb2.OP_T}
_FLIP = {"n": "t", "t": "n"}


def as_matrix(name: str, x: Any) -> np.ndarray:
    """x as a 2-D C-contiguous little-endian float32 array (no copy when it is one already)."""
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} has an empty dimension: shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=_wire.FP32)


def parse_op(name: str, op: Any) -> str:
    """"n" or "t" (either case): BLAS's transa / transb."""
    o = op.lower() if isinstance(op, str) else op
    if o not in OPS:
        raise ValueError(f"{name} must be 'n' or 't', got {op!r}")
    return o


def stored_form(x: Any, op: str, regions: RegionTable) -> Tuple[Any, str]:
    """(what is sent, its op). An array stored transposed, a Fortran-order array or a `.T` view of a
    row-major one, whose transpose is row-major (dense, or a view in a shared-memory region), is sent as that
    transpose with the op flipped: the server multiplies the same op(X) and no byte is copied."""
    if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype != np.float32 or x.flags.c_contiguous:
        return x, op
    if x.T.flags.c_contiguous or regions.ref(x.T) is not None:
        return x.T, _FLIP[op]
    return x, op


def handles_without_shape(operands: Sequence[Any], known: Dict[str, Tuple[int, int]]) -> List[str]:
    """Handles among the operands whose shape the client does not know yet (ask ListMatrices)."""
    return [x for x in operands if isinstance(x, str) and not isinstance(x, Handle) and x not in known]


def _region_ref(out: pb2.RegionRef, ref: Tuple[SharedRegion, int, int]) -> None:
    region, offset, ld = ref
    out.region, out.offset, out.ld = region.name, offset, ld


def put_messages(matrix: Any, ref: Optional[Tuple[SharedRegion, int, int]], evictable: bool, label: str,
                 chunk_elems: int) -> Tuple[Tuple[int, int], Callable[[], Iterator[bytes]]]:
    """One PutMatrix call's (rows, cols) and its messages: the header, naming `matrix`'s region when `ref`
    places it in one (no chunk follows), else followed by its chunks. Both clients send these."""
    header = pb2.PutMatrixHeader(evictable=evictable, label=label)
    flat = None
    if ref is not None:
        rows, cols = matrix.shape
        _region_ref(header.region, ref)
    else:
        arr = as_matrix("matrix", matrix)
        rows, cols = arr.shape
        flat = arr.reshape(-1)
    header.rows, header.cols = rows, cols

    def messages() -> Iterator[bytes]:
        yield pb2.PutMatrixRequest(header=header).SerializeToString()
        if flat is not None:
            for frame, _ in _wire.chunk_frames([_wire.StripeRange(_wire.MATRIX_A, 0, flat.size)],
                                               {_wire.MATRIX_A: flat}, chunk_elems):
                yield frame

    return (rows, cols), messages


class Request:
    """Everything one multiply() call sends and expects, whatever drives it."""

    def __init__(self, a: Any, b: Any, c: Any, alpha: float, beta: float, *, precision: str,
                 kernel: Optional[str], split: Optional[str], trace: bool, keep: bool, keep_evictable: bool,
                 send_c: bool, out: Optional[np.ndarray], connections: int, chunk_bytes: int, transport: str,
                 regions: RegionTable, handle_shapes: Dict[str, Tuple[int, int]], op_a: str = "n",
                 op_b: str = "n", blocks: Optional[Dict[str, Optional[Sequence[int]]]] = None):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of pingpong, cublas or None, got {kernel!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of auto, single, rows, k or None, got {split!r}")
        if (keep_evictable or send_c) and not keep:
            raise ValueError("keep_evictable and send_c apply to a kept result: pass keep=True")
        if keep and not send_c and out is not None:
            raise ValueError("out with keep=True needs send_c=True (otherwise C stays on the server)")
        self.keep, self.send_c = keep, send_c
        self.chunk_elems = max(1, chunk_bytes // 4)
        if any(cuda_ipc.is_device_array(x) for x in (a, b, c, out)):
            self._init_device(a, b, c, alpha, beta, out, precision, kernel, split, trace, keep, op_a, op_b, blocks)
            return
        # op = "t": the operand is stored transposed (a is k x m, b is n x k) and the product uses its
        # transpose; a transposed view is sent as the row-major array under it, op flipped (stored_form).
        op_a, op_b = parse_op("op_a", op_a), parse_op("op_b", op_b)
        a, op_a = stored_form(a, op_a, regions)
        b, op_b = stored_form(b, op_b, regions)
        self.op_a, self.op_b = op_a, op_b

        # Blocks of resident matrices (a_at=(row, col, rows, cols)): the operand is the rows x cols block,
        # as stored, whose first element is (row, col) of the handle's matrix (GemmHeader.a_at).
        at: Dict[int, Tuple[int, int, int, int]] = {}
        for which, x in ((_wire.MATRIX_A, a), (_wire.MATRIX_B, b), (_wire.MATRIX_C, c)):
            block = (blocks or {}).get(_NAMES[which])
            if block is None:
                continue
            name = _NAMES[which]
            if not isinstance(x, str):
                raise ValueError(f"{name}_at names a block of a resident matrix: {name} must be a handle")
            if len(block) != 4 or any(int(v) != v for v in block) or min(block[:2]) < 0 or min(block[2:]) < 1:
                raise ValueError(f"{name}_at must be (row, col, rows, cols) with row, col >= 0 and rows, cols >= 1, "
                                 f"got {block!r}")
            at[which] = tuple(int(v) for v in block)

        # Shapes: arrays give theirs, handles theirs (from put, or from ListMatrices; a block its own).
        handles: Dict[int, str] = {}
        arrays: Dict[int, np.ndarray] = {}
        originals: Dict[int, Any] = {}
        shapes: Dict[int, Tuple[int, int]] = {}
        for which, x in ((_wire.MATRIX_A, a), (_wire.MATRIX_B, b), (_wire.MATRIX_C, c)):
            if x is None:
                continue
            name = _NAMES[which]
            if which in at:
                handles[which], shapes[which] = str(x), at[which][2:]
            elif isinstance(x, str):
                shape = x.shape if isinstance(x, Handle) else handle_shapes.get(x)
                if shape is None:
                    raise SgemmError(grpc.StatusCode.NOT_FOUND, f"{name}: resident matrix {x} is not listed by "
                                     "the server (deleted, evicted, or another client's)")
                handles[which], shapes[which] = str(x), shape
            else:
                originals[which] = x
                if transport == "shm" and regions.ref(x) is not None:
                    shapes[which] = x.shape  # named in place: converted only if it must travel after all
                else:
                    arrays[which] = as_matrix(name, x)
                    shapes[which] = arrays[which].shape
        # Stored shapes: A is m x k (k x m under op_a = "t"), B k x n (n x k under op_b = "t").
        self.a_dims, self.b_dims = shapes[_wire.MATRIX_A], shapes[_wire.MATRIX_B]
        m, k = self.a_dims if op_a == "n" else self.a_dims[::-1]
        kb, n = self.b_dims if op_b == "n" else self.b_dims[::-1]
        if kb != k and op_a == op_b == "n":
            raise ValueError(f"a is {m}x{k} and b is {kb}x{n}: a's columns must equal b's rows")
        if kb != k:
            raise ValueError(f"op(a) is {m}x{k} and op(b) is {kb}x{n}: op(a)'s columns must equal op(b)'s rows "
                             f"(op_a={op_a!r}, op_b={op_b!r})")
        has_c = _wire.MATRIX_C in shapes
        if has_c and shapes[_wire.MATRIX_C] != (m, n):
            raise ValueError(f"c has shape {shapes[_wire.MATRIX_C]}, expected {(m, n)} (rows of a, columns of b)")
        if out is not None:
            if not isinstance(out, np.ndarray) or out.shape != (m, n) or out.dtype != np.float32:
                got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
                raise ValueError(f"out must be a float32 numpy array of shape {(m, n)}, got {got}")
            if not out.flags.writeable:
                raise ValueError("out is read-only")
        self.m, self.n, self.k, self.has_c = m, n, k, has_c
        self.out = out

        h = pb2.GemmHeader(m=m, n=n, k=k, alpha=float(alpha), beta=float(beta), has_c=has_c,
                           kernel=KERNELS[kernel], split=SPLITS[split], precision=PRECISIONS[precision],
                           trace=trace, keep_result=keep, keep_evictable=keep_evictable, send_c=send_c,
                           op_a=OPS[op_a], op_b=OPS[op_b])
        h.a_handle = handles.get(_wire.MATRIX_A, "")
        h.b_handle = handles.get(_wire.MATRIX_B, "")
        h.c_handle = handles.get(_wire.MATRIX_C, "")
        for which, field in ((_wire.MATRIX_A, h.a_at), (_wire.MATRIX_B, h.b_at), (_wire.MATRIX_C, h.c_at)):
            if which in at:
                field.row, field.col = at[which][:2]
        self.header = h

        # The mode: a row of the table above.
        self.out_ref = regions.ref(out) if out is not None else None
        refs = {w: regions.ref(x) for w, x in originals.items()}
        if handles or keep or transport != "shm":
            self.mode = "stream"
        elif all(r is not None for r in refs.values()):
            self.mode = "regions"
        else:
            self.mode = "scratch"
        if self.mode != "regions":
            for w, x in originals.items():
                if w not in arrays:
                    arrays[w] = as_matrix(_NAMES[w], x)
        self.arrays = {w: arr.reshape(-1) for w, arr in arrays.items()}
        self.skip = set(handles)
        self.plan = _wire.StripePlan(1, 0, [[]])
        if self.mode == "regions":
            _region_ref(h.a_region, refs[_wire.MATRIX_A])
            _region_ref(h.b_region, refs[_wire.MATRIX_B])
            if has_c:
                _region_ref(h.c_region, refs[_wire.MATRIX_C])
            if self.out_ref is not None:
                _region_ref(h.out_region, self.out_ref)
        elif self.mode == "stream":
            # One stream for handles; a transposed operand is striped by its stored rows, like the others.
            stripes = 1 if handles else _wire.stripes_for(m, n, k, has_c, connections)
            self.plan = _wire.plan_stripes(m, n, k, has_c, stripes, chunk_bytes, op_a, op_b)
            if self.plan.stripes > 1:
                h.stripes, h.stripe_rows = self.plan.stripes, self.plan.stripe_rows
        # Scratch layout: A, B, C, each 64-byte aligned.
        align = lambda x: (x + 63) // 64 * 64  # noqa: E731
        self.scratch_offsets = (0, align(m * k * 4), align(m * k * 4) + align(k * n * 4))
        self.scratch_bytes = self.scratch_offsets[2] + m * n * 4

        # Where C lands on this side (chunks of C, or the copy out of the scratch region): out itself when it
        # is dense, else a new array (copied into out at the end). None when the server writes C into out.
        self.c_comes_back = not (self.mode == "scratch" or (self.mode == "regions" and self.out_ref is not None)
                                 or (keep and not send_c))
        self.result: Optional[np.ndarray] = None
        if self.c_comes_back or (self.mode == "scratch" and self.out_ref is None):
            if out is not None and out.flags.c_contiguous:
                self.result = out
            else:
                self.result = np.empty((m, n), dtype=np.float32)

    def _init_device(self, a: Any, b: Any, c: Any, alpha: float, beta: float, out: Any, precision: str,
                     kernel: Optional[str], split: Optional[str], trace: bool, keep: bool, op_a: str, op_b: str,
                     blocks: Optional[Dict[str, Optional[Sequence[int]]]]) -> None:
        """The `device` row: every operand a GPU array, named by CUDA IPC in the header; nothing streamed."""
        for name, x in (("a", a), ("b", b), ("c", c)):
            if x is not None and not cuda_ipc.is_device_array(x):
                raise ValueError(f"{name}: with device arrays every operand must be one (got {type(x).__name__}); "
                                 "copy it to the GPU, or pass host arrays only")
        if out is not None and not cuda_ipc.is_device_array(out):
            raise ValueError("out: with device operands, out must be a device array too (or None: C comes back)")
        if keep or any(v is not None for v in (blocks or {}).values()):
            raise ValueError("device arrays cannot be kept (keep) or name resident blocks (a_at, b_at, c_at)")
        if parse_op("op_a", op_a) != "n" or parse_op("op_b", op_b) != "n":
            raise ValueError("device arrays are multiplied untransposed: op_a and op_b must be 'n'")
        h = pb2.GemmHeader(alpha=float(alpha), beta=float(beta), has_c=c is not None, kernel=KERNELS[kernel],
                           split=SPLITS[split], precision=PRECISIONS[precision], trace=trace)
        m, k = cuda_ipc.device_ref("a", a, h.a_device)
        kb, n = cuda_ipc.device_ref("b", b, h.b_device)
        if kb != k:
            raise ValueError(f"a is {m}x{k} and b is {kb}x{n}: a's columns must equal b's rows")
        if c is not None and cuda_ipc.device_ref("c", c, h.c_device) != (m, n):
            raise ValueError(f"c must be {m}x{n} (rows of a, columns of b)")
        if out is not None and cuda_ipc.device_ref("out", out, h.out_device) != (m, n):
            raise ValueError(f"out must be {m}x{n} (rows of a, columns of b)")
        for x in (a, b, c, out):
            if x is not None:
                cuda_ipc.sync(x)
        h.m, h.n, h.k = m, n, k
        self.header = h
        self.m, self.n, self.k, self.has_c = m, n, k, c is not None
        self.op_a = self.op_b = "n"
        self.a_dims, self.b_dims = (m, k), (k, n)
        self.mode = "device"
        self.out, self.out_ref = out, None
        self.arrays: Dict[int, np.ndarray] = {}
        self.skip: set = set()
        self.plan = _wire.StripePlan(1, 0, [[]])
        self.scratch_offsets, self.scratch_bytes = (0, 0, 0), 0
        self.c_comes_back = out is None
        self.result = np.empty((m, n), dtype=np.float32) if out is None else None

    @property
    def transport(self) -> str:
        return {"stream": "grpc", "regions": "shm", "scratch": "shm-copy", "device": "cuda-ipc"}[self.mode]

    def use_scratch(self, region: SharedRegion) -> None:
        """Scratch mode: copies the operands into `region` and names it in the header."""
        a_off, b_off, c_off = self.scratch_offsets
        view = lambda off, rows, cols: np.frombuffer(region.buffer, dtype=np.float32, count=rows * cols,  # noqa: E731
                                                     offset=off).reshape(rows, cols)
        m, n, h = self.m, self.n, self.header
        (ar, ac), (br, bc) = self.a_dims, self.b_dims  # as stored (the header carries the ops)
        view(a_off, ar, ac)[...] = self.arrays[_wire.MATRIX_A].reshape(ar, ac)
        view(b_off, br, bc)[...] = self.arrays[_wire.MATRIX_B].reshape(br, bc)
        for field, off in ((h.a_region, a_off), (h.b_region, b_off)):
            field.region, field.offset, field.ld = region.name, off, 0
        if self.has_c:
            view(c_off, m, n)[...] = self.arrays[_wire.MATRIX_C].reshape(m, n)
            h.c_region.region, h.c_region.offset, h.c_region.ld = region.name, c_off, 0
        if self.out_ref is not None:
            _region_ref(h.out_region, self.out_ref)
        else:
            h.out_region.region, h.out_region.offset, h.out_region.ld = region.name, c_off, 0
        self._scratch_c = view(c_off, m, n)

    def copy_out_scratch(self) -> None:
        """Scratch mode, once the server answered: C out of the scratch region into the result, before the
        region goes back to the client for another call (another thread may take it at once)."""
        scratch_c = getattr(self, "_scratch_c", None)  # set by use_scratch
        if self.mode == "scratch" and self.out_ref is None and scratch_c is not None:
            self.result[...] = scratch_c
        self._scratch_c = None

    def header_message(self) -> bytes:
        return pb2.MultiplyRequest(header=self.header).SerializeToString()

    def new_receiver(self) -> "Receiver":
        return Receiver(self)

    def frames(self, stripe: int, token: bytes, receiver: "Receiver") -> Iterator[bytes]:
        """Stripe `stripe`'s messages: the header (stripe 0) or its attach, then its chunks. Marks the
        upload of this stripe done in `receiver` once its last message has been taken."""
        if stripe == 0:
            yield self.header_message()
        else:
            yield pb2.MultiplyRequest(attach=pb2.StripeAttach(token=token, stripe=stripe)).SerializeToString()
        for frame, payload in _wire.chunk_frames(self.plan.per_stripe[stripe] if self.mode == "stream" else [],
                                                 self.arrays, self.chunk_elems, self.skip):
            receiver.sent(payload)
            yield frame
        receiver.upload_done()

    def finish(self, receiver: "Receiver", wall_ms: float, attempts: int):
        """(C, Summary) once the call succeeded."""
        from ._types import Summary

        self.copy_out_scratch()  # done already where the scratch region went back (_through_scratch)
        if self.out is not None and self.result is not None and self.result is not self.out:
            self.out[...] = self.result
        proto = receiver.summary
        summary = Summary(proto, wall_ms=wall_ms, attempts=attempts, bytes_sent=receiver.bytes_sent,
                          bytes_received=receiver.received * 4, transport=self.transport,
                          first_c_before_upload_end=receiver.first_c_early, rpc=receiver.rpc)
        if self.keep and not self.send_c:
            return Handle(proto.result_handle, (self.m, self.n)), summary
        return (self.out if self.out is not None else self.result), summary


class Receiver:
    """What comes back on a request's streams: chunks of C (into the request's result), the stripe grant,
    the summary. Fed by one thread per stripe."""

    def __init__(self, req: Request):
        self.req = req
        self.c = req.result.reshape(-1) if (req.c_comes_back and req.result is not None) else None
        self.expected = req.m * req.n if req.c_comes_back else 0
        self.summary: Optional[pb2.MultiplySummary] = None
        self.grant: Optional[bytes] = None
        self.grant_event = threading.Event()
        self.received = 0
        self.bytes_sent = 0
        self.first_c_early = False
        self.rpc = "stream"  # the RPC that carried the request ("unary": MultiplyUnary)
        self._uploads_open = req.plan.stripes if req.mode == "stream" else 0
        self._lock = threading.Lock()
        self.t0 = time.monotonic()

    def sent(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_sent += nbytes

    def upload_done(self) -> None:
        with self._lock:
            self._uploads_open -= 1

    def on_message(self, msg) -> None:
        if isinstance(msg, _wire.CChunk):
            if self.c is None or msg.matrix != _wire.MATRIX_C or msg.offset + msg.count > self.c.size:
                raise SgemmError(grpc.StatusCode.INTERNAL, f"the server sent a chunk outside C: matrix "
                                 f"{msg.matrix}, offset {msg.offset}, {msg.count} values")
            self.c[msg.offset:msg.offset + msg.count] = msg.values()
            with self._lock:
                if self.received == 0 and self._uploads_open > 0:
                    self.first_c_early = True
                self.received += msg.count
            return
        kind = msg.WhichOneof("kind")
        if kind == "summary":
            self.summary = msg.summary
        elif kind == "stripe_grant":
            self.grant = msg.stripe_grant.token
            self.grant_event.set()

    def check(self) -> None:
        """After every stream ended OK: the summary and all of C arrived."""
        if self.summary is None or self.received != self.expected:
            raise SgemmError(grpc.StatusCode.INTERNAL, f"the stream ended with {self.received} of {self.expected} "
                             f"values of C{'' if self.summary is not None else ' and no summary'}")


def first_failure(errors: List[Tuple[int, SgemmError]]) -> SgemmError:
    """Which stripe's failure to report: the first that is not another stripe's ABORTED echo or our own cancel."""
    for _, e in errors:
        if e.code not in (grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED):
            return e
    return errors[0][1]


Matrix = Union[np.ndarray, str, Sequence[Sequence[float]]]
