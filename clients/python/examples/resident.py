#!/usr/bin/env python3
"""Resident matrices: put B once, multiply many A's by its handle, keep a result
on the server and feed it to the next product, list, delete.

    python3 resident.py --server localhost:50051
"""
import argparse

import numpy as np

import sgemm_client


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--size", type=int, default=512)
    args = p.parse_args()
    n = args.size
    rng = np.random.default_rng()
    w1 = rng.standard_normal((n, n), dtype=np.float32) / np.sqrt(n)
    w2 = rng.standard_normal((n, n), dtype=np.float32) / np.sqrt(n)

    with sgemm_client.Client(args.server) as cl:
        h1 = cl.put(w1, label="w1")  # a Handle: a str, with .shape and .placement
        h2 = cl.put(w2, label="w2")
        print(f"put w1 as {h1} ({h1.placement}), w2 as {h2}")
        worst = 0.0
        for _ in range(3):  # many A's against the same weights: only A travels
            x = rng.standard_normal((7, n), dtype=np.float32)
            y, summary = cl.multiply(x, h1, timeout=60)
            ref = x.astype(np.float64) @ w1.astype(np.float64)
            worst = max(worst, float(np.max(np.abs(y - ref))))
        # A chain: the first product stays on the server (its handle), the second takes it as A.
        x = rng.standard_normal((5, n), dtype=np.float32)
        hidden, summary = cl.multiply(x, h1, keep=True, timeout=60)
        print(f"kept x w1 as {hidden} ({summary.bytes_received} bytes of it came back)")
        z, _ = cl.multiply(hidden, h2, timeout=60)
        ref = (x.astype(np.float64) @ w1.astype(np.float64)) @ w2.astype(np.float64)
        worst = max(worst, float(np.max(np.abs(z - ref))))
        for m in cl.list().matrices:
            print(f"  {m.handle} {m.rows}x{m.cols} label={m.label!r} uses={m.uses}")
        for h in (h1, h2, hidden):
            cl.delete(h)
        print(f"max |C - reference| = {worst:.3e}")


if __name__ == "__main__":
    main()
