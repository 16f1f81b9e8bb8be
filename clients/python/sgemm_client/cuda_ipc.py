"""Device buffers (CUDA IPC): matrices already on a GPU of the server's host,
multiplied where they are (docs/transport.md, "Device buffers"; docs/python.md).

Any object with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba, ...), or a
DLPack array on a CUDA device (``__dlpack__`` with ``__dlpack_device__`` ==
(kDLCUDA, id): JAX, ...), can be ``a``, ``b``, ``c`` or ``out`` of
``Client.multiply``: the client sends the
allocation's CUDA IPC handle, the GPU's PCI bus id, the byte offset of the
matrix inside its allocation and its leading dimension; the server opens the
allocation once per connection and computes on that GPU. No matrix byte
crosses gRPC (with ``out`` on the GPU too, none comes back).

The handle comes from the CUDA runtime itself (libcudart through ctypes, and
the driver's cuMemGetAddressRange for the allocation's start), so neither CuPy
nor PyTorch is needed, and importing this module needs no CUDA: the libraries
are loaded the first time a device array is used.

multiply() waits for the stream each array's interface names (its producer's
work) before it sends the header; ``out`` is final when multiply() returns.
The server keeps an allocation open for the connection that named it: close
the client before freeing device memory it multiplied in.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Optional, Tuple

from ._proto import sgemm_pb2 as pb2

IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)
_KDL_CUDA = 2  # DLDeviceType kDLCUDA
_RUNTIME_NAMES = ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0")


def is_device_array(x: Any) -> bool:
    """Whether x is a GPU array this client can name by CUDA IPC."""
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        try:
            return int(x.__dlpack_device__()[0]) == _KDL_CUDA
        except Exception:  # noqa: BLE001 - an object that cannot say is not one
            return False
    return False


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


def dlpack_interface(x: Any) -> dict:
    """x's DLPack tensor described as a ``__cuda_array_interface__`` dict (shape, typestr, data, strides in
    bytes), plus its DLPack device type. The capsule is only read, never consumed: the producer keeps the
    memory, which x holds."""
    capsule = x.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = _DLTensor.from_address(get(capsule, b"dltensor"))  # DLManagedTensor starts with its DLTensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    floats = (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1)  # kDLFloat, 32 bits
    itemsize = max(1, t.dtype.bits // 8)
    strides = None if not t.strides else tuple(t.strides[i] * itemsize for i in range(t.ndim))
    iface = {"shape": shape, "typestr": "<f4" if floats else f"dlpack:{t.dtype.code}/{t.dtype.bits}",
             "data": ((t.data or 0) + t.byte_offset, False), "strides": strides, "version": 3,
             "device_type": t.device.device_type}
    del capsule  # its destructor tells the producer we are done with the descriptor
    return iface


def interface(x: Any) -> dict:
    """The ``__cuda_array_interface__`` of x, or the same read from its DLPack tensor."""
    if hasattr(x, "__cuda_array_interface__"):
        return x.__cuda_array_interface__
    iface = dlpack_interface(x)
    if iface["device_type"] != _KDL_CUDA:
        raise ValueError(f"a DLPack array on device type {iface['device_type']} is not CUDA device memory")
    return iface


class _Cuda:
    """The few CUDA runtime and driver calls a device reference needs, loaded once."""

    _lock = threading.Lock()
    _loaded: Optional["_Cuda"] = None

    @classmethod
    def get(cls) -> "_Cuda":
        with cls._lock:
            if cls._loaded is None:
                cls._loaded = cls()
            return cls._loaded

    def __init__(self) -> None:
        rt = None
        for name in _RUNTIME_NAMES:
            try:
                rt = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if rt is None:
            raise RuntimeError("device arrays need the CUDA runtime (libcudart.so), which could not be loaded")
        try:
            drv = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError("device arrays need the CUDA driver (libcuda.so.1)") from e
        self.rt, self.drv = rt, drv
        rt.cudaGetErrorString.restype = ctypes.c_char_p
        rt.cudaIpcGetMemHandle.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        rt.cudaDeviceGetPCIBusId.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        rt.cudaGetDevice.argtypes = [ctypes.POINTER(ctypes.c_int)]
        rt.cudaSetDevice.argtypes = [ctypes.c_int]
        drv.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                                ctypes.c_uint64]
        drv.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"{what} failed: {self.rt.cudaGetErrorString(err).decode()}")

    def _device_of(self, ptr: int) -> int:
        ordinal = ctypes.c_int(-1)
        # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL (9): the GPU the memory is on.
        err = self.drv.cuPointerGetAttribute(ctypes.byref(ordinal), 9, ctypes.c_uint64(ptr))
        if err != 0:
            raise ValueError(f"pointer {ptr:#x} is not CUDA device memory (CUresult {err})")
        return ordinal.value

    def sync_legacy_stream(self, ptr: int) -> None:
        """Waits for the legacy default stream of the GPU holding ptr."""
        current = ctypes.c_int(0)
        self._check(self.rt.cudaGetDevice(ctypes.byref(current)), "cudaGetDevice")
        self._check(self.rt.cudaSetDevice(self._device_of(ptr)), "cudaSetDevice")
        try:
            self.rt.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
            self._check(self.rt.cudaStreamSynchronize(ctypes.c_void_p(1)), "cudaStreamSynchronize")  # cudaStreamLegacy
        finally:
            self.rt.cudaSetDevice(current.value)

    def describe(self, ptr: int) -> Tuple[bytes, str, int, int]:
        """(ipc handle, PCI bus id, byte offset inside the allocation, allocation size) of device pointer ptr."""
        ordinal = ctypes.c_int(self._device_of(ptr))
        current = ctypes.c_int(0)
        self._check(self.rt.cudaGetDevice(ctypes.byref(current)), "cudaGetDevice")
        self._check(self.rt.cudaSetDevice(ordinal.value), "cudaSetDevice")
        try:
            base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
            err = self.drv.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
            if err != 0:
                raise RuntimeError(f"cuMemGetAddressRange failed (CUresult {err})")
            handle = ctypes.create_string_buffer(IPC_HANDLE_BYTES)
            self._check(self.rt.cudaIpcGetMemHandle(handle, ctypes.c_void_p(base.value)), "cudaIpcGetMemHandle")
            bus = ctypes.create_string_buffer(32)
            self._check(self.rt.cudaDeviceGetPCIBusId(bus, 32, ordinal.value), "cudaDeviceGetPCIBusId")
        finally:
            self.rt.cudaSetDevice(current.value)
        return handle.raw, bus.value.decode(), ptr - base.value, size.value


def device_ref(name: str, x: Any, out: pb2.DeviceBufferRef, release: bool = False) -> Tuple[int, int]:
    """Fills `out` with the reference to 2-D float32 device array x (row-major, any row stride); returns its
    shape. ValueError naming `name` for what the server could not multiply."""
    iface = interface(x)
    shape = tuple(iface["shape"])
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"{name} must be a 2-D device array with no empty dimension, got shape {shape}")
    if iface["typestr"] not in ("<f4", "=f4", "|f4"):
        raise ValueError(f"{name} must hold float32 (typestr '<f4'), got {iface['typestr']!r}")
    rows, cols = shape
    strides = iface.get("strides")
    ld = cols
    if strides is not None:
        row_stride, col_stride = strides
        if col_stride != 4 and cols > 1:
            raise ValueError(f"{name}: device arrays must be row-major (element stride 4 bytes, got strides "
                             f"{strides}); pass a contiguous copy")
        if rows > 1 and (row_stride % 4 or row_stride < 4 * cols):
            raise ValueError(f"{name}: a row stride of {row_stride} bytes is not a whole number of float32 >= "
                             f"the width {cols}")
        ld = row_stride // 4 if rows > 1 else cols
    ptr = int(iface["data"][0])
    handle, bus, offset, _ = _Cuda.get().describe(ptr)
    out.ipc_handle, out.device, out.offset, out.ld, out.release = handle, bus, offset, ld, release
    return rows, cols


def sync(x: Any) -> None:
    """Waits for the work the array's producer queued on its stream (the interface's `stream`, version 3),
    so the server reads finished inputs."""
    if not hasattr(x, "__cuda_array_interface__"):
        # DLPack: __dlpack__() without a stream made the producer order its work before the legacy
        # default stream of the array's GPU; waiting for that stream waits for the producer.
        _Cuda.get().sync_legacy_stream(int(interface(x)["data"][0]))
        return
    stream = x.__cuda_array_interface__.get("stream")
    if stream:
        rt = _Cuda.get().rt
        rt.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        err = rt.cudaStreamSynchronize(ctypes.c_void_p(stream))
        if err != 0:
            raise RuntimeError(f"cudaStreamSynchronize failed: {rt.cudaGetErrorString(err).decode()}")
