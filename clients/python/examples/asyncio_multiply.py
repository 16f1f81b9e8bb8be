#!/usr/bin/env python3
"""The asyncio client: several products in flight from one event loop.

    python3 asyncio_multiply.py --server localhost:50051
"""
import argparse
import asyncio

import numpy as np

import sgemm_client


async def run(server, count, size):
    rng = np.random.default_rng()
    pairs = [(rng.standard_normal((size + i, size), dtype=np.float32),
              rng.standard_normal((size, size - i), dtype=np.float32)) for i in range(count)]
    async with sgemm_client.aio.Client(server) as cl:
        results = await asyncio.gather(*(cl.multiply(a, b, timeout=60) for a, b in pairs))
    worst = 0.0
    for (a, b), (c, summary) in zip(pairs, results):
        worst = max(worst, float(np.max(np.abs(c - a.astype(np.float64) @ b.astype(np.float64)))))
        print(f"request {summary.request_id}: {c.shape[0]}x{c.shape[1]} in {summary.wall_ms:.1f} ms")
    print(f"max |C - reference| = {worst:.3e}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--count", type=int, default=4)
    p.add_argument("--size", type=int, default=300)
    args = p.parse_args()
    asyncio.run(run(args.server, args.count, args.size))


if __name__ == "__main__":
    main()
