#!/usr/bin/env python3
"""C = alpha*A*B + beta*C on sgemm-server from numpy, checked against numpy in float64.

    python3 multiply.py --server localhost:50051 [--m 1000 --n 700 --k 1500] [--precision fp32]
"""
import argparse

import numpy as np

import sgemm_client


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051", help="host:port, or unix:PATH")
    p.add_argument("--m", type=int, default=1000)
    p.add_argument("--n", type=int, default=700)
    p.add_argument("--k", type=int, default=1500)
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp32x3"])
    args = p.parse_args()

    rng = np.random.default_rng()
    a = rng.standard_normal((args.m, args.k), dtype=np.float32)
    b = rng.standard_normal((args.k, args.n), dtype=np.float32)
    c0 = rng.standard_normal((args.m, args.n), dtype=np.float32)

    with sgemm_client.Client(args.server) as cl:
        # C = 2*A*B + 0.5*C0. B and C0 go first, then A, so the server computes while A arrives; UNAVAILABLE
        # (a busy server) is retried; the timeout covers it all.
        c, summary = cl.multiply(a, b, c0, alpha=2.0, beta=0.5, precision=args.precision, timeout=60)

    ref = 2.0 * (a.astype(np.float64) @ b.astype(np.float64)) + 0.5 * c0.astype(np.float64)
    print(f"C is {c.shape[0]}x{c.shape[1]}, max |C - reference| = {np.max(np.abs(c - ref)):.3e}")
    print(f"request {summary.request_id}: backend {summary.backend}, kernel {summary.kernel}, precision "
          f"{summary.precision_name}, server total {summary.total_ms:.1f} ms (queue {summary.queue_ms:.1f}, receive "
          f"{summary.receive_ms:.1f}, compute {summary.compute_ms:.1f}); client {summary.wall_ms:.1f} ms over "
          f"{summary.transport}")
    for d in summary.devices:
        print(f"  device {d.index} {d.name}: rows {d.row_begin}-{d.row_end}, kernel {d.kernel_ms:.2f} ms")


if __name__ == "__main__":
    main()
