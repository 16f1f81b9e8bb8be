#!/usr/bin/env python3
"""Health, server info and a request's trace (open the file in ui.perfetto.dev).

    python3 observe.py --server localhost:50051 --trace-file trace.json
"""
import argparse
import json

import numpy as np

import sgemm_client


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--trace-file", default="trace.json")
    args = p.parse_args()
    with sgemm_client.Client(args.server) as cl:
        print(f"health: {cl.health()}")
        info = cl.info()
        print(f"sgemm-server {info.version}, backend {info.backend}, kernels {list(info.kernels)}, "
              f"{len(info.devices)} device(s), {info.load.requests_total} requests so far")
        a = np.random.default_rng().standard_normal((300, 200), dtype=np.float32)
        c, summary = cl.multiply(a, a.T, trace=True, timeout=60)
        with open(args.trace_file, "w") as f:
            json.dump(summary.trace(), f)
        print(f"trace of request {summary.request_id}: {len(summary.trace()['traceEvents'])} events in "
              f"{args.trace_file}")
        print(f"max |C - reference| = {np.max(np.abs(c - a.astype(np.float64) @ a.T.astype(np.float64))):.3e}")


if __name__ == "__main__":
    main()
