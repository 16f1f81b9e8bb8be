"""Device arrays (CUDA IPC) against the real sgemm-server on a GPU, driving the
CUDA runtime through ctypes (no CuPy or PyTorch needed): device memory allocated here,
wrapped in a minimal `__cuda_array_interface__` object, multiplied by the server
in place on odd shapes with strided layouts, C written into a device array or
returned as numpy, by the blocking and the asyncio client, checked against a
float64 numpy reference; an allocation open for one token is refused to another; PyTorch tensors given through
DLPack alone, where PyTorch is installed. Skips, saying why, without a GPU."""

import asyncio
import ctypes
import json
import os
import sys
import unittest

import numpy as np

import sgemm_client
from checks import TOLERANCE, max_error, random
from server_process import ServerProcess


def load_runtime():
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


RT = load_runtime()


def gpu_count():
    if RT is None:
        return 0
    n = ctypes.c_int(0)
    return n.value if RT.cudaGetDeviceCount(ctypes.byref(n)) == 0 else 0


class DeviceArray:
    """rows x cols float32 on GPU `device` with row stride `ld` floats, in its own cudaMalloc allocation at
    byte `offset` (so the server must find the matrix inside the allocation)."""

    def __init__(self, rows, cols, ld=None, offset=0, device=0):
        self.rows, self.cols, self.ld, self.offset, self.device = rows, cols, ld or cols, offset, device
        RT.cudaSetDevice(device)
        self.base = ctypes.c_void_p()
        assert RT.cudaMalloc(ctypes.byref(self.base), ctypes.c_size_t(offset + rows * self.ld * 4)) == 0
        self.ptr = self.base.value + offset
        self.__cuda_array_interface__ = {"shape": (rows, cols), "typestr": "<f4", "data": (self.ptr, False),
                                         "strides": (self.ld * 4, 4), "version": 3, "stream": None}

    def put(self, host):
        host = np.ascontiguousarray(host, np.float32)
        RT.cudaSetDevice(self.device)
        assert RT.cudaMemcpy2D(ctypes.c_void_p(self.ptr), ctypes.c_size_t(self.ld * 4), host.ctypes.data_as(
            ctypes.c_void_p), ctypes.c_size_t(self.cols * 4), ctypes.c_size_t(self.cols * 4),
            ctypes.c_size_t(self.rows), 1) == 0  # cudaMemcpyHostToDevice

    def get(self):
        host = np.empty((self.rows, self.cols), np.float32)
        RT.cudaSetDevice(self.device)
        assert RT.cudaMemcpy2D(host.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(self.cols * 4),
                               ctypes.c_void_p(self.ptr), ctypes.c_size_t(self.ld * 4),
                               ctypes.c_size_t(self.cols * 4), ctypes.c_size_t(self.rows), 2) == 0
        return host

    def free(self):
        RT.cudaSetDevice(self.device)
        RT.cudaFree(self.base)


@unittest.skipUnless(gpu_count() >= 1, "needs a CUDA GPU and libcudart: run it on the GPU machine")
class CudaIpc(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ.setdefault("SGEMM_E2E_BACKEND", "cuda")
        cls.server = ServerProcess(unix=True)
        tokens = cls.server.dir / "tokens.json"
        tokens.write_text(json.dumps({"clients": [{"name": "alice", "token": "alice-ipc-token-0123456789"},
                                                  {"name": "bob", "token": "bob-ipc-token-0123456789ab"}]}))
        cls.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
        cls.arrays = []

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.log()
        for x in cls.arrays:
            x.free()  # after the server closed its mappings

    def device(self, host, ld=None, offset=0):
        x = DeviceArray(host.shape[0], host.shape[1], ld, offset)
        x.put(host)
        self.arrays.append(x)
        return x

    def test_odd_shapes_strided_c_in_place(self):
        m, n, k = 203, 77, 151
        a, b, c0 = random(self.rng, m, k), random(self.rng, k, n), random(self.rng, m, n)
        da, db, dc = self.device(a, ld=k + 2, offset=256), self.device(b), self.device(c0, ld=n + 5, offset=64)
        with sgemm_client.Client(self.server.unix_target) as cl:
            for _ in range(2):  # the second call finds the allocations open
                dc.put(c0)
                got, summary = cl.multiply(da, db, dc, alpha=1.5, beta=-0.5, out=dc, timeout=60)
                self.assertIs(got, dc)
                self.assertEqual((summary.transport, summary.bytes_sent, summary.bytes_received), ("cuda-ipc", 0, 0))
                self.assertLessEqual(max_error(dc.get(), a, b, c0, 1.5, -0.5), TOLERANCE)

    def test_c_back_as_numpy(self):
        m, n, k = 65, 129, 33
        a, b = random(self.rng, m, k), random(self.rng, k, n)
        with sgemm_client.Client(self.server.unix_target) as cl:
            got, summary = cl.multiply(self.device(a), self.device(b), timeout=60)
        self.assertIsInstance(got, np.ndarray)
        self.assertEqual(summary.bytes_received, m * n * 4)
        self.assertLessEqual(max_error(got, a, b), TOLERANCE)

    def test_asyncio_client(self):
        m, n, k = 97, 45, 71
        a, b = random(self.rng, m, k), random(self.rng, k, n)
        da, db, dc = self.device(a), self.device(b), self.device(np.zeros((m, n), np.float32), ld=n + 3)

        async def run():
            async with sgemm_client.aio.Client(self.server.unix_target) as cl:
                return await cl.multiply(da, db, out=dc, timeout=60)

        got, summary = asyncio.run(run())
        self.assertIs(got, dc)
        self.assertEqual(summary.transport, "cuda-ipc")
        self.assertLessEqual(max_error(dc.get(), a, b), TOLERANCE)

    def test_another_token_cannot_use_an_open_allocation(self):
        server = ServerProcess("--auth-tokens", str(self.server.dir / "tokens.json"), unix=True)
        try:
            m, n, k = 31, 17, 9
            a, b = random(self.rng, m, k), random(self.rng, k, n)
            da, db, dc = self.device(a), self.device(b), self.device(np.zeros((m, n), np.float32))
            with sgemm_client.Client(server.unix_target, token="alice-ipc-token-0123456789") as alice, \
                    sgemm_client.Client(server.unix_target, token="bob-ipc-token-0123456789ab", retries=0) as bob:
                alice.multiply(da, db, out=dc, timeout=60)
                self.assertLessEqual(max_error(dc.get(), a, b), TOLERANCE)
                with self.assertRaises(sgemm_client.SgemmError) as e:
                    bob.multiply(da, self.device(b), timeout=60)
                self.assertEqual(e.exception.code.name, "PERMISSION_DENIED")
                self.assertIn("header.a_device", str(e.exception))
        finally:
            assert server.stop() == 0, server.log()


def torch_cuda():
    """torch where it is installed with a CUDA device, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


class DLPackOnly:
    """A tensor seen only through the DLPack protocol (no __cuda_array_interface__), as JAX hands arrays out."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, stream=None):
        return self.tensor.__dlpack__() if stream is None else self.tensor.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


@unittest.skipUnless(gpu_count() >= 1 and torch_cuda() is not None, "needs a CUDA GPU and PyTorch with CUDA")
class DLPackDeviceArrays(unittest.TestCase):
    """PyTorch tensors on the GPU given to the client through DLPack alone: odd shapes, a strided C view
    written in place, C back as numpy, after the tensors' own work on torch's stream."""

    @classmethod
    def setUpClass(cls):
        os.environ.setdefault("SGEMM_E2E_BACKEND", "cuda")
        cls.server = ServerProcess(unix=True)
        cls.rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.log()

    def test_dlpack_tensors_in_and_c_in_place(self):
        torch = torch_cuda()
        m, n, k = 211, 67, 129
        a, b, c0 = random(self.rng, m, k), random(self.rng, k, n), random(self.rng, m, n)
        # A and B made by torch's own kernels (a scale by 1) on its stream, so that the client must wait for them.
        ta = torch.from_numpy(a).cuda() * 1.0
        tb = torch.from_numpy(b).cuda() * 1.0
        wide = torch.zeros((m, n + 7), dtype=torch.float32, device="cuda")
        tc = wide[:, :n]  # row stride n + 7
        tc.copy_(torch.from_numpy(c0))
        with sgemm_client.Client(self.server.unix_target) as cl:
            _, summary = cl.multiply(DLPackOnly(ta), DLPackOnly(tb), DLPackOnly(tc), alpha=0.5, beta=2.0,
                                     out=DLPackOnly(tc), timeout=60)
            self.assertEqual((summary.transport, summary.bytes_sent, summary.bytes_received), ("cuda-ipc", 0, 0))
            self.assertLessEqual(max_error(tc.cpu().numpy(), a, b, c0, 0.5, 2.0), TOLERANCE)
            self.assertTrue(torch.all(wide[:, n:] == 0).item(), "C's padding was written")
            got, summary = cl.multiply(DLPackOnly(ta), DLPackOnly(tb), timeout=60)
        self.assertIsInstance(got, np.ndarray)
        self.assertEqual(summary.bytes_received, m * n * 4)
        self.assertLessEqual(max_error(got, a, b), TOLERANCE)


if __name__ == "__main__":
    print(f"GPUs visible: {gpu_count()}", file=sys.stderr)
    unittest.main()
