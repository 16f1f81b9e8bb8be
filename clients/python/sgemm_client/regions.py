"""Shared-memory regions for callers on the server's host (docs/transport.md,
"Shared-memory regions"): numpy arrays whose memory the server maps too, so a
multiply names them by region, offset and leading dimension and no matrix
byte crosses gRPC.

A `SharedRegion` is a POSIX shared-memory object mapped here. Objects the
client creates (Client.empty) are made with mode 0600 and their name is
unlinked as soon as the server has registered them: both sides have them
mapped by then, so the memory goes with the last mapping and a killed client
leaves nothing in /dev/shm. Objects the caller brings (Client.register) keep
their names: the caller owns them.

Any numpy array whose memory lies inside a registered region counts as being
in it, views and slices included: a row-major view with unit column stride
becomes a RegionRef{region, offset, ld}.

Threads: a RegionTable is guarded by its own lock; SharedRegion is immutable
after construction.
"""

from __future__ import annotations

import mmap
import os
import secrets
import threading
from typing import List, Optional, Tuple

import numpy as np

try:
    import _posixshmem  # shm_open/shm_unlink, as multiprocessing.shared_memory uses them
except ImportError:  # pragma: no cover - every CPython on Linux has it
    _posixshmem = None


def _shm_open(name: str, flags: int, mode: int = 0o600) -> int:
    if _posixshmem is not None:
        return _posixshmem.shm_open(name, flags, mode)
    return os.open("/dev/shm/" + name.lstrip("/"), flags | os.O_CLOEXEC, mode)


def _shm_unlink(name: str) -> None:
    try:
        if _posixshmem is not None:
            _posixshmem.shm_unlink(name)
        else:
            os.unlink("/dev/shm/" + name.lstrip("/"))
    except FileNotFoundError:
        pass


def address_of(buffer) -> int:
    """The address of a (non-empty) buffer's first byte."""
    return np.frombuffer(buffer, dtype=np.uint8).ctypes.data


class SharedRegion:
    """A shared-memory object mapped into this process, under `name` on the server."""

    def __init__(self, name: str, shm_name: str, buffer, nbytes: int, owned: bool, keep=None):
        self.name = name  # the registration name on the server
        self.shm_name = shm_name  # the POSIX object ("/name")
        self.buffer = buffer  # the mapping: an mmap, or the caller's SharedMemory.buf
        self.nbytes = nbytes
        self.owned = owned  # created here (unlinked once registered) rather than brought by the caller
        self.address = address_of(buffer)
        self._keep = keep  # an object the mapping belongs to (the caller's SharedMemory), kept alive

    @staticmethod
    def create(nbytes: int) -> "SharedRegion":
        """A new object of `nbytes` (zero-filled, mode 0600), mapped here; not yet registered."""
        if nbytes <= 0:
            raise ValueError(f"a region needs at least one byte, got {nbytes}")
        name = f"/sgemm-py-{os.getpid()}-{secrets.token_hex(8)}"
        fd = _shm_open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, nbytes)
            buf = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            _shm_unlink(name)
            raise
        finally:
            os.close(fd)
        return SharedRegion(name, name, buf, nbytes, owned=True)

    @staticmethod
    def attach(shm) -> "SharedRegion":
        """The caller's object: a multiprocessing.shared_memory.SharedMemory, or a POSIX name ("/name")."""
        if isinstance(shm, str):
            name = shm if shm.startswith("/") else "/" + shm
            fd = _shm_open(name, os.O_RDWR)
            try:
                nbytes = os.fstat(fd).st_size
                if nbytes <= 0:
                    raise ValueError(f"shared-memory object {name} is empty")
                buf = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
            return SharedRegion(f"sgemm-py-{os.getpid()}-{secrets.token_hex(8)}", name, buf, nbytes, owned=False)
        buf = getattr(shm, "buf", None)
        if buf is None or not hasattr(shm, "name"):
            raise TypeError("register() takes a multiprocessing.shared_memory.SharedMemory or a POSIX "
                            f"shared-memory name, got {type(shm).__name__}: an ordinary array is not in shared "
                            "memory (use Client.empty to make one that is)")
        name = shm.name if shm.name.startswith("/") else "/" + shm.name
        return SharedRegion(f"sgemm-py-{os.getpid()}-{secrets.token_hex(8)}", name, buf, shm.size, owned=False,
                            keep=shm)

    def array(self, shape, dtype=np.float32) -> np.ndarray:
        """A numpy view of the region's first bytes as `shape`."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if count * dtype.itemsize > self.nbytes:
            raise ValueError(f"shape {tuple(shape)} of {dtype} needs {count * dtype.itemsize} bytes; the region "
                             f"has {self.nbytes}")
        return np.frombuffer(self.buffer, dtype=dtype, count=count).reshape(shape)

    def unlink(self) -> None:
        """Removes the object's name (the mappings stay): done once the server has it mapped."""
        if self.owned:
            _shm_unlink(self.shm_name)


class RegionTable:
    """The regions registered through one client, looked up by address."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: List[SharedRegion] = []

    def add(self, region: SharedRegion) -> None:
        with self._lock:
            self._regions.append(region)

    def remove(self, region: SharedRegion) -> None:
        with self._lock:
            self._regions = [r for r in self._regions if r is not region]

    def all(self) -> List[SharedRegion]:
        with self._lock:
            return list(self._regions)

    def find(self, arr: np.ndarray) -> Optional[SharedRegion]:
        """The region holding every byte of `arr`, if any."""
        if not isinstance(arr, np.ndarray) or arr.size == 0:
            return None
        lo, hi = _extent(arr)
        with self._lock:
            for r in self._regions:
                if r.address <= lo and hi <= r.address + r.nbytes:
                    return r
        return None

    def ref(self, arr: np.ndarray) -> Optional[Tuple[SharedRegion, int, int]]:
        """(region, byte offset, leading dimension) when `arr` is a float32 2-D matrix inside a region with
        unit column stride (a row-major matrix, dense or a view of a wider one); None otherwise."""
        if not isinstance(arr, np.ndarray) or arr.ndim != 2 or arr.dtype != np.float32:
            return None
        if arr.dtype.byteorder not in ("=", "<", "|"):
            return None
        rows, cols = arr.shape
        s0, s1 = arr.strides
        if (cols > 1 and s1 != 4) or (rows > 1 and (s0 % 4 or s0 < 4 * cols)):
            return None
        region = self.find(arr)
        if region is None:
            return None
        offset = arr.ctypes.data - region.address
        ld = s0 // 4 if rows > 1 else cols
        return region, offset, (0 if ld == cols else ld)


def _extent(arr: np.ndarray) -> Tuple[int, int]:
    lo = hi = arr.ctypes.data
    for n, s in zip(arr.shape, arr.strides):
        if s >= 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    return lo, hi + arr.itemsize
