#!/usr/bin/env python3
"""sgemm-timings: summarise sgemm-server's timings.jsonl (and traces).

  sgemm-timings summary /var/log/sgemm/timings.jsonl              # p50/p90/p99 per phase
  sgemm-timings summary timings.jsonl --since 1h --last 100 --csv
  sgemm-timings summary timings.jsonl --png timings.png            # phases per device, GFLOP/s over time
  sgemm-timings list timings.jsonl --last 20                        # one line per request, in order
  sgemm-timings trace trace.json --png trace.png                   # a request's trace as a picture

Input lines are sgemm.timing/1 records (docs/observability.md): the server's
timings.jsonl and `sgemm-client submit --json` write the same schema. Lines of
any other kind are skipped (and counted on stderr).

Groups: shape class, backend, split and device. A shape's class rounds each of
m, n, k up to a power of two ("4096^3" holds every m, n, k in 2049..4096;
"8192x8192x1024" otherwise). Service phases (receive, queue, compute, send,
total) are per request, under device "-"; device phases are per device, each
as working time and as waiting (copy_in_wait: for the client's data,
kernel_wait: for copies in, reduce_wait: for peer GPUs, copy_out_wait: for
kernels, order_wait: for the NCCL order).

Only the standard library is needed, except for --png (matplotlib).
"""
import argparse
import csv
import datetime
import json
import math
import re
import sys
import time

SCHEMA = "sgemm.timing/1"
SERVICE_PHASES = ["receive", "queue", "compute", "send", "total"]
DEVICE_PHASES = ["copy_in", "kernel", "reduce", "copy_out"]
DEVICE_FIELDS = []
for _p in DEVICE_PHASES:
    DEVICE_FIELDS += [_p, _p + "_wait"]
DEVICE_FIELDS.append("order_wait")
PERCENTILES = (50, 90, 99)


def percentile(values, q):
    """The q-th percentile with linear interpolation between order statistics
    (numpy's default), or nan for no values."""
    if not values:
        return float("nan")
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def pow2_ceil(x):
    return 1 << max(0, int(x) - 1).bit_length()


def shape_class(m, n, k):
    dims = [pow2_ceil(m), pow2_ceil(n), pow2_ceil(k)]
    if dims[0] == dims[1] == dims[2]:
        return "%d^3" % dims[0]
    return "x".join(str(d) for d in dims)


def parse_since(text, now=None):
    """--since: Unix seconds, an ISO-8601 time (UTC unless it says), or an
    age such as 90s, 30m, 2h, 1d."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text)
    if m:
        return now - float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("--since %r: give Unix seconds, an ISO-8601 time (2026-11-26T14:00) or an age "
                         "(90s, 30m, 2h, 1d)" % text) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return t.timestamp()


def read_records(paths):
    records, skipped = [], 0
    for path in paths:
        with (sys.stdin if path == "-" else open(path, encoding="utf-8")) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    skipped += 1
                    continue
                if not isinstance(r, dict) or r.get("schema") != SCHEMA:
                    skipped += 1
                    continue
                records.append(r)
    if skipped:
        print("sgemm-timings: skipped %d line(s) that are not %s records" % (skipped, SCHEMA), file=sys.stderr)
    records.sort(key=lambda r: r.get("time", 0))
    return records


def select(records, since=None, last=None):
    if since is not None:
        records = [r for r in records if r.get("time", 0) >= since]
    if last is not None:
        records = records[-last:] if last > 0 else []
    return records


def group_key(r):
    s = r["shape"]
    return (shape_class(s["m"], s["n"], s["k"]), r["backend"], r["split"])


def summarise(records):
    """Rows of (class, backend, split, device, phase, count, p50, p90, p99), in ms."""
    samples = {}
    for r in records:
        cls, backend, split = group_key(r)
        for p in SERVICE_PHASES:
            samples.setdefault((cls, backend, split, "-", p), []).append(float(r[p + "_ms"]))
        for d in r.get("devices", []):
            dev = "cpu" if d["index"] < 0 else str(d["index"])
            for p in DEVICE_FIELDS:
                samples.setdefault((cls, backend, split, dev, p), []).append(float(d[p + "_ms"]))
    order = {p: i for i, p in enumerate(SERVICE_PHASES + DEVICE_FIELDS)}

    def sort_key(key):
        cls, backend, split, dev, phase = key
        return (cls, backend, split, (dev != "-", dev), order[phase])

    rows = []
    for key in sorted(samples, key=sort_key):
        v = samples[key]
        rows.append(key + (len(v),) + tuple(percentile(v, q) for q in PERCENTILES))
    return rows


HEADER = ["class", "backend", "split", "device", "phase", "count", "p50_ms", "p90_ms", "p99_ms"]


def print_rows(rows, as_csv, out=sys.stdout):
    if as_csv:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(HEADER)
        for r in rows:
            w.writerow(list(r[:6]) + ["%.3f" % x for x in r[6:]])
        return
    fmt = "%-16s %-8s %-7s %-6s %-14s %6s %11s %11s %11s"
    print(fmt % tuple(HEADER), file=out)
    last_group = None
    for r in rows:
        if last_group is not None and r[:3] != last_group:
            print(file=out)
        last_group = r[:3]
        print(fmt % (r[0], r[1], r[2], r[3], r[4], r[5], "%.3f" % r[6], "%.3f" % r[7], "%.3f" % r[8]), file=out)


def gflops_of(r):
    s = r["shape"]
    return 2.0 * s["m"] * s["n"] * s["k"] / (r["total_ms"] * 1e6) if r["total_ms"] > 0 else 0.0


def plot_summary(records, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    devices = {}
    for r in records:
        cls, _, split = group_key(r)
        for d in r.get("devices", []):
            dev = "%s\n%s %s" % ("cpu" if d["index"] < 0 else "GPU %d" % d["index"], cls, split)
            acc = devices.setdefault(dev, {p: [] for p in DEVICE_FIELDS})
            for p in DEVICE_FIELDS:
                acc[p].append(float(d[p + "_ms"]))
    names = sorted(devices, key=lambda n: (n.split("\n")[1], n))
    # Room for every label: the bars' panel widens with their number, labels stand upright.
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(6.5 + max(6.5, 0.45 * len(names)), 5.6),
                                   gridspec_kw={"width_ratios": [max(1.0, 0.45 * len(names) / 6.5), 1.0]})
    colors = {"copy_in": "#4c72b0", "kernel": "#55a868", "reduce": "#c44e52", "copy_out": "#8172b2"}
    bottoms = [0.0] * len(names)
    for p in DEVICE_FIELDS:
        vals = [percentile(devices[n][p], 50) for n in names]
        if not any(v > 0 for v in vals):
            continue
        base = p.replace("_wait", "")
        wait = p.endswith("_wait")
        color = colors.get(base, "#937860")
        ax1.bar(names, vals, bottom=bottoms, color=color, alpha=0.35 if wait else 1.0,
                hatch="//" if wait else None, edgecolor="black", linewidth=0.3, label=p)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax1.set_ylabel("median ms per request")
    ax1.set_title("phases per device and shape class (solid: working, hatched: waiting)", fontsize=10)
    ax1.tick_params(axis="x", labelsize=7, labelrotation=90)
    ax1.legend(fontsize=7, ncol=2)
    t0 = records[0]["time"] if records else 0
    by_class = {}
    for r in records:
        by_class.setdefault(group_key(r), []).append(r)
    for key, rs in sorted(by_class.items()):
        ax2.plot([r["time"] - t0 for r in rs], [gflops_of(r) for r in rs], "o-", ms=3, label="%s %s %s" % key)
    ax2.set_xlabel("seconds since the first request")
    ax2.set_ylabel("GFLOP/s (server total)")
    ax2.set_title("throughput over time")
    ax2.legend(fontsize=6, ncol=1 + len(by_class) // 10)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ---- Traces -------------------------------------------------------------------


def load_trace(path):
    with open(path, encoding="utf-8") as f:
        try:
            doc = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError("%s is not a trace (not one JSON document: %s)" % (path, e)) from None
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    procs, threads, slices = {}, {}, []
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e.get("ph") == "X":
            slices.append(e)
    return doc, procs, threads, slices


def trace_summary(path):
    """Per track: busy ms by slice name. The waiting of a collective is the
    'waiting for peers' slices on each GPU's NCCL track."""
    _, procs, threads, slices = load_trace(path)
    totals = {}
    for e in slices:
        key = (procs.get(e["pid"], str(e["pid"])), threads.get((e["pid"], e["tid"]), str(e["tid"])), e["name"])
        totals[key] = totals.get(key, 0.0) + e["dur"] / 1000.0
    return totals


def plot_trace(path, out, title=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc, procs, threads, slices = load_trace(path)
    tracks = sorted({(e["pid"], e["tid"]) for e in slices})
    colors = {"copy in": "#4c72b0", "copy out": "#8172b2", "waiting for peers": "#dddddd",
              "waiting for input": "#eeeeee", "receive": "#64b5cd", "queue": "#cccccc", "compute": "#55a868",
              "send": "#8172b2"}
    fig, ax = plt.subplots(figsize=(13, 0.42 * len(tracks) + 1.6))
    labels = []
    for row, tr in enumerate(tracks):
        labels.append("%s / %s" % (procs.get(tr[0], tr[0]), threads.get(tr, tr[1])))
        for e in slices:
            if (e["pid"], e["tid"]) != tr:
                continue
            name = e["name"]
            color = colors.get(name, "#c44e52" if "NCCL" in name else "#55a868")
            ax.broken_barh([(e["ts"] / 1000.0, max(e["dur"] / 1000.0, 1e-3))], (row - 0.4, 0.8), facecolors=color,
                           edgecolor="black", linewidth=0.2, hatch="//" if name.startswith("waiting") else None)
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels([l[:60] for l in labels], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the request arrived")
    other = doc.get("otherData", {}) if isinstance(doc, dict) else {}
    if title is None and other:
        s = other.get("shape", {})
        title = "request %s: %sx%sx%s, %s, split %s, kernel %s" % (
            other.get("request_id", "?"), s.get("m"), s.get("n"), s.get("k"), other.get("backend"),
            other.get("split"), other.get("kernel"))
    ax.set_title(title or path, fontsize=9)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=n) for n, c in
                       [("copy in/out", "#4c72b0"), ("kernel", "#55a868"), ("NCCL", "#c44e52"),
                        ("waiting", "#dddddd")]], fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


LIST_HEADER = ["id", "shape", "backend", "kernel", "split", "receive_ms", "queue_ms", "compute_ms", "send_ms",
               "total_ms", "gflops", "kernel_ms_max", "copy_in_wait_ms_max", "reduce_ms_max", "reduce_wait_ms_max"]


def list_rows(records):
    """One row per request: the service's phases and the slowest device's
    kernel, input wait, reduce and wait for peers."""
    rows = []
    for r in records:
        s = r["shape"]
        devs = r.get("devices", []) or [{}]

        def worst(field):
            return max(float(d.get(field, 0.0)) for d in devs)

        rows.append([r["request_id"], "%dx%dx%d" % (s["m"], s["n"], s["k"]), r["backend"], r["kernel"], r["split"],
                     r["receive_ms"], r["queue_ms"], r["compute_ms"], r["send_ms"], r["total_ms"], gflops_of(r),
                     worst("kernel_ms"), worst("copy_in_wait_ms"), worst("reduce_ms"), worst("reduce_wait_ms")])
    return rows


def print_list(rows, as_csv, out=sys.stdout):
    if as_csv:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(LIST_HEADER)
        for r in rows:
            w.writerow(r[:5] + ["%.3f" % x for x in r[5:]])
        return
    fmt = "%-6s %-17s %-5s %-9s %-6s" + " %10s" * 10
    print(fmt % tuple(h.replace("_ms", "").replace("_max", "") for h in LIST_HEADER), file=out)
    for r in rows:
        print(fmt % tuple(r[:5] + ["%.1f" % x if i == 5 else "%.3f" % x for i, x in enumerate(r[5:])]), file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="sgemm-timings", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary", help="percentiles of each phase per shape class, backend, split and device")
    s.add_argument("logs", nargs="+", help="timings.jsonl files ('-' = stdin)")
    s.add_argument("--since", help="only records from this time: Unix seconds, ISO-8601, or an age (30m, 2h, 1d)")
    s.add_argument("--last", type=int, help="only the last N records (after --since)")
    s.add_argument("--csv", action="store_true", help="CSV instead of a table")
    s.add_argument("--png", help="also draw phases per device (stacked) and GFLOP/s over time into this PNG")
    li = sub.add_parser("list", help="one line per request: phases, GFLOP/s, the slowest device's kernel and waits")
    li.add_argument("logs", nargs="+", help="timings.jsonl files ('-' = stdin)")
    li.add_argument("--since", help="as for summary")
    li.add_argument("--last", type=int, help="only the last N records")
    li.add_argument("--csv", action="store_true", help="CSV instead of a table")
    t = sub.add_parser("trace", help="summarise a request's trace (--trace / --trace-dir) and draw it")
    t.add_argument("trace", help="Chrome trace-event JSON written by sgemm-server")
    t.add_argument("--png", help="draw the trace (a row per track) into this PNG")
    t.add_argument("--title", help="the picture's title (default: the request)")
    a = ap.parse_args(argv)
    try:
        return run(a)
    except OSError as e:  # a missing or unreadable file: one line, not a traceback
        print("sgemm-timings: cannot read %s: %s" % (e.filename or "input", e.strerror or e), file=sys.stderr)
    except ValueError as e:  # a bad --since, a trace that is not JSON
        print("sgemm-timings: %s" % e, file=sys.stderr)
    except (KeyError, TypeError) as e:  # JSON, but not of the shape expected
        print("sgemm-timings: %s is not a Chrome trace-event file of sgemm-server (no %s)"
              % (getattr(a, "trace", "the input"), e), file=sys.stderr)
    return 2


def run(a):
    if a.cmd == "list":
        records = select(read_records(a.logs), parse_since(a.since) if a.since else None, a.last)
        print_list(list_rows(records), a.csv)
        return 0 if records else 1
    if a.cmd == "summary":
        since = parse_since(a.since) if a.since else None
        records = select(read_records(a.logs), since, a.last)
        if not records:
            print("sgemm-timings: no records selected", file=sys.stderr)
            return 1
        print_rows(summarise(records), a.csv)
        if a.png:
            plot_summary(records, a.png, "%d requests, %s" % (len(records), ", ".join(a.logs)))
        return 0
    totals = trace_summary(a.trace)
    print("%-40s %-26s %-24s %10s" % ("process", "track", "slice", "total ms"))
    for (proc, thread, name), ms in sorted(totals.items()):
        print("%-40.40s %-26.26s %-24.24s %10.3f" % (proc, thread, name, ms))
    if a.png:
        plot_trace(a.trace, a.png, a.title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
