"""Device arrays (CUDA IPC) without a GPU: sgemm_client imports and its checks
of a `__cuda_array_interface__` operand (2-D, float32, row-major, a whole-float
row stride) refuse what the server could not multiply, naming the operand,
before any CUDA library is loaded; every operand must then be a device array."""

import unittest

import numpy as np

import sgemm_client
from sgemm_client import cuda_ipc, pb2
from sgemm_client._request import Request
from sgemm_client.regions import RegionTable


class FakeDeviceArray:
    """Only the interface: its pointer is never read, since every check here fails before."""

    def __init__(self, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0x1000, False),
                                         "strides": strides, "version": 3}


def request(a, b, c=None, out=None, **kw):
    args = dict(precision="fp32", kernel=None, split=None, trace=False, keep=False, keep_evictable=False,
                send_c=False, out=out, connections=1, chunk_bytes=1 << 20, transport="shm", regions=RegionTable(),
                handle_shapes={})
    args.update(kw)
    return Request(a, b, c, 1.0, 0.0, **args)


class DeviceRefs(unittest.TestCase):
    def test_recognised_by_the_interface(self):
        self.assertTrue(cuda_ipc.is_device_array(FakeDeviceArray((3, 4))))
        self.assertFalse(cuda_ipc.is_device_array(np.zeros((3, 4), np.float32)))
        self.assertTrue(hasattr(sgemm_client, "Client"))

    def test_bad_layouts_name_the_operand(self):
        ref = pb2.DeviceBufferRef()
        cases = [(FakeDeviceArray((3, 4, 5)), "a must be a 2-D"),
                 (FakeDeviceArray((3, 0)), "a must be a 2-D"),
                 (FakeDeviceArray((3, 4), typestr="<f8"), "a must hold float32"),
                 (FakeDeviceArray((3, 4), strides=(4, 12)), "a: device arrays must be row-major"),
                 (FakeDeviceArray((3, 4), strides=(14, 4)), "a: a row stride of 14 bytes"),
                 (FakeDeviceArray((3, 4), strides=(8, 4)), "a: a row stride of 8 bytes")]
        for x, message in cases:
            with self.subTest(message=message), self.assertRaises(ValueError) as e:
                cuda_ipc.device_ref("a", x, ref)
            self.assertIn(message, str(e.exception))

    def test_dlpack_tensors_are_read_as_they_are(self):
        # numpy exports DLPack on the CPU: the descriptor is read in place (pointer, shape, byte strides,
        # dtype), and an array that is not on a CUDA device is refused.
        base = np.arange(48, dtype=np.float32).reshape(6, 8)
        for x in (base, base[1:5, 2:7]):
            iface = cuda_ipc.dlpack_interface(x)
            self.assertEqual(iface["shape"], x.shape)
            self.assertEqual(iface["typestr"], "<f4")
            self.assertEqual(iface["data"][0], x.ctypes.data)
            self.assertIn(iface["strides"], (None, x.strides) if x.flags.c_contiguous else (x.strides,))
            self.assertEqual(iface["device_type"], 1)  # kDLCPU
        self.assertNotEqual(cuda_ipc.dlpack_interface(base.astype(np.float64))["typestr"], "<f4")
        self.assertFalse(cuda_ipc.is_device_array(base), "a CPU DLPack array is not a device array")
        with self.assertRaises(ValueError) as e:
            cuda_ipc.interface(base)
        self.assertIn("not CUDA device memory", str(e.exception))

    def test_every_operand_must_be_on_the_gpu(self):
        dev = FakeDeviceArray((5, 3))
        with self.assertRaises(ValueError) as e:
            request(dev, np.zeros((3, 7), np.float32))
        self.assertIn("b: with device arrays every operand must be one", str(e.exception))
        with self.assertRaises(ValueError) as e:
            request(dev, dev, out=np.zeros((5, 3), np.float32))
        self.assertIn("out: with device operands", str(e.exception))
        with self.assertRaises(ValueError) as e:
            request(dev, dev, op_a="t")
        self.assertIn("untransposed", str(e.exception))
        with self.assertRaises(ValueError) as e:
            request(dev, dev, keep=True)
        self.assertIn("cannot be kept", str(e.exception))


if __name__ == "__main__":
    unittest.main()
