#!/usr/bin/env python3
"""Multiplies two random matrices on sgemm-server and checks C against numpy.

    PYTHONPATH=clients/python python3 clients/python/examples/multiply.py --server localhost:50051
"""
import argparse

import numpy as np

import sgemm_client


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--m", type=int, default=1000)
    p.add_argument("--n", type=int, default=700)
    p.add_argument("--k", type=int, default=1500)
    args = p.parse_args()

    rng = np.random.default_rng()
    a = rng.standard_normal((args.m, args.k), dtype=np.float32)
    b = rng.standard_normal((args.k, args.n), dtype=np.float32)
    c0 = rng.standard_normal((args.m, args.n), dtype=np.float32)

    # C = 2*A*B + 0.5*C0; the client chunks A, B and C0 and retries if the server is busy.
    c, summary = sgemm_client.multiply(a, b, c0, alpha=2.0, beta=0.5, target=args.server, timeout=60)

    ref = 2.0 * (a.astype(np.float64) @ b.astype(np.float64)) + 0.5 * c0.astype(np.float64)
    print(f"C is {c.shape[0]}x{c.shape[1]}, max |C - reference| = {np.max(np.abs(c - ref)):.3e}")
    print(f"request {summary.request_id}: backend {summary.backend}, kernel {summary.kernel}, "
          f"server total {summary.total_ms:.1f} ms (queue {summary.queue_ms:.1f}, receive {summary.receive_ms:.1f}, "
          f"compute {summary.compute_ms:.1f})")
    for d in summary.devices:
        print(f"  device {d.index} {d.name}: rows {d.row_begin}-{d.row_end}, kernel {d.kernel_ms:.2f} ms")


if __name__ == "__main__":
    main()
