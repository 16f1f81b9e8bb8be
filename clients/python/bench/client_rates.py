#!/usr/bin/env python3
"""The Python client against the C++ client (sgemm-client submit) on one
server: upload and download rates, end-to-end products, over 1 and 4
connections, and through shared memory on the Unix socket.

Each request shape isolates one direction, as grpc-transport-bench does:
  up    m = 2N, n = 1, k = N: A is 2 N^2 floats up, C 2N floats down
  down  m = N, n = N, k = 1:  C is N^2 floats down, A and B N floats up
  e2e   N^3
Rates are payload bytes / client wall time (request start to C in hand).
Results are checked first (sampled rows of C against float64 numpy, and
sgemm-client --verify), then timed: per round and configuration a warm-up
request, then --repeat timed ones (median); the rounds alternate Python and
C++ so that both see the same load. Client CPU per request: the Python
process's CPU time (all its threads, and its stripe worker processes) over the timed requests, and that of
the busiest of those processes (what one interpreter lock carries); for sgemm-client,
see cpp_runs. Page faults per request (minor: fresh pages the allocator maps
and the kernel zeroes) are counted the same way for both.

Over 4 connections the Python client runs once per --stripe-workers mode
(threads: a thread per stripe in one interpreter; processes: a worker process
per stripe); the ratio table gives each Python path's rate over the C++
client's on the same connections in the same round.

    client_rates.py --server HOST:PORT --unix PATH --cli build/bin/sgemm-client [--size 2048] [--repeat 3] [--rounds 2]
                    [--kinds up,down,e2e] [--stripe-workers threads,processes] [--no-shm]
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

import sgemm_client

SHAPES = {"up": lambda n: (2 * n, 1, n), "down": lambda n: (n, n, 1), "e2e": lambda n: (n, n, n)}


def payload(kind, m, n, k):
    """Bytes the measured direction carries."""
    return {"up": m * k * 4, "down": m * n * 4, "e2e": (m * k + k * n + m * n) * 4}[kind]


def check(c, a, b, rng):
    rows = rng.choice(a.shape[0], size=min(16, a.shape[0]), replace=False)
    ref = a[rows].astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a[rows]).astype(np.float64) @ np.abs(b).astype(np.float64)
    err = float(np.max(np.abs(c[rows] - ref) / np.maximum(scale, 1e-30)))
    if err > 1e-4:
        sys.exit(f"C is wrong: max relative error {err:.3e}")
    return err


def worker_usage(client):
    """{pid: (CPU seconds, minor page faults)} of the client's stripe worker processes so far, all their threads
    (/proc/PID/stat: utime + stime in clock ticks, minflt; /proc/PID/schedstat would count the main thread only)."""
    usage = {}
    for pid in client.worker_pids():
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        usage[pid] = ((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[7]))
    return usage


def python_runs(client, a, b, repeat, out=None):
    """Median wall ms, CPU ms and page faults per request (the client's process and its stripe workers) of
    `repeat` timed requests after one warm-up, how many of them had rows of C back before their upload
    ended, and the CPU ms per request of the busiest process (what one interpreter lock has to carry)."""
    client.multiply(a, b, out=out, timeout=600)
    walls, early = [], 0
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cpu0 = time.process_time()
    workers0 = worker_usage(client)
    for _ in range(repeat):
        t0 = time.perf_counter()
        _, summary = client.multiply(a, b, out=out, timeout=600)
        walls.append((time.perf_counter() - t0) * 1e3)
        early += summary.first_c_before_upload_end
    workers = worker_usage(client)
    own = time.process_time() - cpu0
    wcpu = [workers[p][0] - workers0[p][0] for p in workers if p in workers0]
    wfaults = sum(workers[p][1] - workers0[p][1] for p in workers if p in workers0)
    cpu = (own + sum(wcpu)) * 1e3 / repeat
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0 + wfaults) / repeat
    return statistics.median(walls), cpu, faults, early, max([own, *wcpu]) * 1e3 / repeat


def cpp_runs(cli, target_args, m, n, k, connections, repeat):
    """Median client wall ms of `repeat` requests after one warm-up, from sgemm-client submit --json, and
    its CPU ms and page faults per request: those of a run of 1 + repeat requests less those of a run of 1
    (which takes away start-up and making the random matrices), over repeat."""

    def run(count):
        cmd = [cli, "submit", *target_args, "--m", str(m), "--n", str(n), "--k", str(k), "--repeat", str(count),
               "--json", "--seed", "1"]
        if connections:
            cmd += ["--connections", str(connections)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {done.stderr}")
        cpu_ms = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e3
        faults = after.ru_minflt - before.ru_minflt
        return json.loads(done.stdout.strip().splitlines()[-1])["client"], cpu_ms, faults

    _, base_cpu, base_faults = run(1)
    out, cpu, faults = run(repeat + 1)
    return (statistics.median(out["total_ms_all"][1:]), max(0.0, cpu - base_cpu) / repeat,
            max(0, faults - base_faults) / repeat)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", required=True, help="host:port")
    p.add_argument("--unix", required=True, help="the same server's Unix socket path")
    p.add_argument("--cli", required=True, help="sgemm-client")
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--kinds", default=",".join(SHAPES), help="shapes to time, comma-separated (of up, down, e2e)")
    p.add_argument("--stripe-workers", default="threads,processes",
                   help="Client(stripe_workers=...) modes timed over 4 connections, comma-separated")
    p.add_argument("--no-shm", action="store_true", help="leave out the shared-memory paths")
    p.add_argument("--json", help="write every figure here")
    args = p.parse_args()
    modes = args.stripe_workers.split(",")
    if not modes or any(mode not in ("threads", "processes") for mode in modes):
        p.error(f"--stripe-workers takes threads and/or processes, got {args.stripe_workers!r}")
    kinds = args.kinds.split(",")
    if not kinds or any(kind not in SHAPES for kind in kinds):
        p.error(f"--kinds takes a comma-separated list of {', '.join(SHAPES)}, got {args.kinds!r}")
    n0 = args.size
    rng = np.random.default_rng(1)
    # Python's paths over TCP: (connections, stripe_workers); one connection has no stripes to spread.
    tcp = {(1, "threads"): sgemm_client.Client(args.server, connections=1, stripe_workers="threads")}
    for mode in modes:
        tcp[(4, mode)] = sgemm_client.Client(args.server, connections=4, stripe_workers=mode)
    unix = sgemm_client.Client(f"unix:{args.unix}")

    # Correctness first, on every path timed below.
    mats = {}
    for kind, shape in SHAPES.items():
        m, n, k = shape(n0)
        mats[kind] = (rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32))
    a, b = mats["e2e"]
    if not args.no_shm:
        x, y, z = unix.empty(a.shape), unix.empty(b.shape), unix.empty((a.shape[0], b.shape[1]))
        x[...], y[...] = a, b
    for client in tcp.values():
        check(client.multiply(a, b, timeout=600)[0], a, b, rng)
    if not args.no_shm:
        check(unix.multiply(a, b, timeout=600)[0], a, b, rng)
        unix.multiply(x, y, out=z, timeout=600)
        check(z, a, b, rng)
    for extra in (["--server", args.server, "--connections", "1"], ["--server", args.server, "--connections", "4"],
                  *([] if args.no_shm else [["--unix", args.unix]])):
        run = subprocess.run([args.cli, "submit", *extra, "--size", str(min(n0, 1024)), "--verify"],
                             capture_output=True, text=True, timeout=900)
        if run.returncode != 0 or "PASS" not in run.stdout:
            sys.exit(f"sgemm-client --verify failed: {run.stdout}{run.stderr}")
    print(f"verified: Python ({', '.join(f'{c} connection(s) {mode}' for c, mode in tcp)}"
          f"{'' if args.no_shm else ', shm scratch, shm regions'}) and sgemm-client --verify", flush=True)

    results = []  # (kind, client, path, round, wall_ms, cpu_ms, faults)
    early_c = {}  # (kind, connections): Python requests whose first rows of C came before their upload ended
    for rnd in range(args.rounds):
        for kind in kinds:
            m, n, k = SHAPES[kind](n0)
            a, b = mats[kind]
            before = len(results)
            for c in (1, 4):
                for (cc, mode), client in tcp.items():
                    if cc != c:
                        continue
                    wall, cpu, faults, early, busiest = python_runs(client, a, b, args.repeat)
                    path = f"grpc {c}" + (f" {mode}" if c > 1 else "")
                    results.append((kind, "python", path, rnd, wall, cpu, faults, busiest))
                    early_c[(kind, path)] = early_c.get((kind, path), 0) + early
                wall, cpu, faults = cpp_runs(args.cli, ["--server", args.server, "--transport", "grpc"], m, n, k,
                                             c, args.repeat)
                results.append((kind, "c++", f"grpc {c}", rnd, wall, cpu, faults, None))
            if kind == "e2e" and not args.no_shm:
                wall, cpu, faults, _, busiest = python_runs(unix, a, b, args.repeat)
                results.append((kind, "python", "shm scratch (copies)", rnd, wall, cpu, faults, busiest))
                wall, cpu, faults, _, busiest = python_runs(unix, x, y, args.repeat, out=z)
                results.append((kind, "python", "shm regions (no copy)", rnd, wall, cpu, faults, busiest))
                wall, cpu, faults = cpp_runs(args.cli, ["--unix", args.unix], m, n, k, 0, args.repeat)
                results.append((kind, "c++", "shm scratch (copies)", rnd, wall, cpu, faults, None))
            for r in results[before:]:
                print(r, flush=True)

    print("\n| shape | path | client | wall ms (median per round) | MB/s | client CPU ms/request "
          "| busiest process CPU ms/request | page faults/request |")
    print("|---|---|---|---|---|---|---|---|")
    keys = []
    for r in results:
        if (r[0], r[2], r[1]) not in keys:
            keys.append((r[0], r[2], r[1]))
    for kind, path, client in keys:
        rows = [r for r in results if (r[0], r[2], r[1]) == (kind, path, client)]
        walls = [r[4] for r in rows]
        m, n, k = SHAPES[kind](n0)
        rates = [payload(kind, m, n, k) / (w * 1e3) for w in walls]
        cpu = [r[5] for r in rows]
        faults = [r[6] for r in rows]
        busiest = [r[7] for r in rows if r[7] is not None]
        busy = f"{min(busiest):.1f}-{max(busiest):.1f}" if busiest else ""
        print(f"| {kind} {m}x{n}x{k} | {path} | {client} | {', '.join(f'{w:.1f}' for w in walls)} | "
              f"{min(rates):.0f}-{max(rates):.0f} | {min(cpu):.1f}-{max(cpu):.1f} | {busy} | "
              f"{min(faults):.0f}-{max(faults):.0f} |")
    for (kind, path), count in early_c.items():
        print(f"python {kind} {path}: {count} of {args.rounds * args.repeat} timed requests had "
              "rows of C back before their upload ended")
    # Python's rate over C++'s on the same connections in the same round (C++ wall / Python wall).
    print("\n| shape | Python path | rate / C++ on as many connections, per round |")
    print("|---|---|---|")
    for kind, path, client in keys:
        if client != "python" or not path.startswith("grpc"):
            continue
        cpp_path = " ".join(path.split()[:2])
        ratios = []
        for rnd in range(args.rounds):
            py = [r[4] for r in results if (r[0], r[1], r[2], r[3]) == (kind, "python", path, rnd)]
            cc = [r[4] for r in results if (r[0], r[1], r[2], r[3]) == (kind, "c++", cpp_path, rnd)]
            if py and cc:
                ratios.append(cc[0] / py[0])
        m, n, k = SHAPES[kind](n0)
        print(f"| {kind} {m}x{n}x{k} | {path} | {', '.join(f'{x:.2f}' for x in ratios)} |")
    if args.json:
        with open(args.json, "w") as f:
            fields = ("shape", "client", "path", "round", "wall_ms", "cpu_ms", "faults", "busiest_process_cpu_ms")
            json.dump([dict(zip(fields, r)) for r in results], f, indent=1)


if __name__ == "__main__":
    main()
