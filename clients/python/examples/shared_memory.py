#!/usr/bin/env python3
"""Zero copies on the server's host: numpy arrays in shared-memory regions
(Client.empty, or memory you already share via Client.register); multiply
names them in place and the server writes C into a region array: no matrix
byte crosses gRPC. The regions are registered once and reused by every call.

    sgemm-server --listen unix:/run/sgemm/sgemm.sock ...
    python3 shared_memory.py --server unix:/run/sgemm/sgemm.sock
"""
import argparse
from multiprocessing import shared_memory

import numpy as np

import sgemm_client


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="unix:/run/sgemm/sgemm.sock", help="the server's Unix socket")
    p.add_argument("--m", type=int, default=1000)
    p.add_argument("--n", type=int, default=700)
    p.add_argument("--k", type=int, default=1500)
    args = p.parse_args()
    m, n, k = args.m, args.n, args.k
    rng = np.random.default_rng()

    with sgemm_client.Client(args.server) as cl:
        x, y, z = cl.empty((m, k)), cl.empty((k, n)), cl.empty((m, n))  # numpy arrays in registered regions
        x[...] = rng.standard_normal((m, k), dtype=np.float32)
        y[...] = rng.standard_normal((k, n), dtype=np.float32)
        for _ in range(3):
            _, summary = cl.multiply(x, y, out=z, timeout=60)
            print(f"{summary.transport}: client {summary.wall_ms:.2f} ms, server compute {summary.compute_ms:.2f} "
                  f"ms, matrix bytes through gRPC: {summary.proto.bytes_received + summary.proto.bytes_sent}")
        worst = float(np.max(np.abs(z - x.astype(np.float64) @ y.astype(np.float64))))

        # A view is a matrix too (rows of x, a leading dimension of k): C's top-left corner in place.
        cl.multiply(x[:100, :k], y, out=z[:100], timeout=60)

        # Memory another part of the program already shares: register it, then use its views.
        shm = shared_memory.SharedMemory(create=True, size=m * k * 4)
        try:
            a = np.ndarray((m, k), dtype=np.float32, buffer=shm.buf)
            a[...] = x
            cl.register(shm)
            c, summary = cl.multiply(a, y, timeout=60)  # without out, C comes back through gRPC
            worst = max(worst, float(np.max(np.abs(c - z))))
            cl.unregister(a)
            del a
        finally:
            shm.close()
            shm.unlink()
    print(f"max |C - reference| = {worst:.3e}")


if __name__ == "__main__":
    main()
