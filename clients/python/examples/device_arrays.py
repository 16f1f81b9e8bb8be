#!/usr/bin/env python3
"""Matrices already on a GPU of the server's host (CUDA IPC): CuPy or PyTorch
arrays, or anything with __cuda_array_interface__ or a CUDA DLPack export, are
passed to multiply as they are; the server opens their memory once and
multiplies on that GPU, writing C into the `out` array. No matrix byte crosses
gRPC or host memory. Needs a cuda server on the same host and CuPy or PyTorch
here; without them it says so and exits 0.

    sgemm-server --listen unix:/run/sgemm/sgemm.sock ...
    python3 device_arrays.py --server unix:/run/sgemm/sgemm.sock
"""
import argparse

import numpy as np

import sgemm_client


def gpu_arrays(m, n, k):
    """(a, b, c, to_numpy) on GPU 0 with CuPy or PyTorch, or None when neither has a GPU here."""
    rng = np.random.default_rng()
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return a, b, cupy.asarray(a), cupy.asarray(b), cupy.zeros((m, n), cupy.float32), cupy.asnumpy
    except Exception:  # noqa: BLE001 - no CuPy, or no GPU for it
        pass
    try:
        import torch

        if torch.cuda.is_available():
            return (a, b, torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(),
                    torch.zeros((m, n), dtype=torch.float32, device="cuda"), lambda t: t.cpu().numpy())
    except Exception:  # noqa: BLE001 - no PyTorch, or no GPU for it
        pass
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="unix:/run/sgemm/sgemm.sock", help="the server's Unix socket")
    p.add_argument("--m", type=int, default=1000)
    p.add_argument("--n", type=int, default=700)
    p.add_argument("--k", type=int, default=1500)
    args = p.parse_args()
    arrays = gpu_arrays(args.m, args.n, args.k)
    if arrays is None:
        print("skipped: neither CuPy nor PyTorch sees a GPU here (device arrays need one)")
        return
    a, b, da, db, dc, to_numpy = arrays
    with sgemm_client.Client(args.server) as cl:
        for _ in range(3):  # the server keeps the allocations open after the first call
            try:
                _, summary = cl.multiply(da, db, out=dc, timeout=60)
            except sgemm_client.SgemmError as e:
                if e.code.name != "FAILED_PRECONDITION":
                    raise
                print(f"skipped: the server cannot take device arrays here: {e}")
                return
            print(f"{summary.transport}: client {summary.wall_ms:.2f} ms, server compute {summary.compute_ms:.2f} "
                  f"ms, matrix bytes through gRPC: {summary.proto.bytes_received + summary.proto.bytes_sent}")
        worst = float(np.max(np.abs(to_numpy(dc) - a.astype(np.float64) @ b.astype(np.float64))))
    print(f"max |C - reference| = {worst:.3e}")


if __name__ == "__main__":
    main()
