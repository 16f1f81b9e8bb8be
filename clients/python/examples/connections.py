#!/usr/bin/env python3
"""One large request over several connections (stripes): its rows travel on
4 TCP connections at once, as the C++ client does above 16 MiB of payload.
--workers picks who drives the stripes: a worker process each ("processes",
the matrices through shared memory) or a thread each ("threads"); "auto"
takes processes where this process may use 4 CPUs or more.

    python3 connections.py --server localhost:50051 --size 2048 --connections 4 --workers processes
"""
import argparse

import numpy as np

import sgemm_client


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--connections", type=int, default=0, help="0 = by size (1 below 16 MiB, else 4)")
    p.add_argument("--workers", choices=("auto", "threads", "processes"), default="auto")
    args = p.parse_args()
    n = args.size
    rng = np.random.default_rng()
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    with sgemm_client.Client(args.server, connections=args.connections, stripe_workers=args.workers) as cl:
        c, summary = cl.multiply(a, b, timeout=300)
        workers = len(cl.worker_pids())
    rows = rng.choice(n, size=min(n, 64), replace=False)  # a sample of rows against float64
    err = np.max(np.abs(c[rows] - a[rows].astype(np.float64) @ b.astype(np.float64)))
    mb = (summary.bytes_sent + summary.bytes_received) / 1e6
    print(f"{n}^3 over {max(1, summary.stripes)} connection(s): {summary.wall_ms:.1f} ms, {mb:.0f} MB moved, "
          f"server compute {summary.compute_ms:.1f} ms, C began before the upload ended: "
          f"{summary.first_c_before_upload_end}, worker processes: {workers}")
    print(f"max |C - reference| = {err:.3e}")


if __name__ == "__main__":
    main()
