#!/usr/bin/env python3
"""sgemm-timings (tools/sgemm_timings.py) on a generated timings.jsonl: the
percentiles, groups, --since, --last and CSV it prints are checked against
numbers computed here; --png draws when matplotlib is there (skipped, with
the reason, when not). Unit: no server."""
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.environ.get("SGEMM_TIMINGS", os.path.join(os.path.dirname(__file__), "../../tools/sgemm_timings.py"))
sys.path.insert(0, os.path.dirname(os.path.abspath(TOOL)))
import sgemm_timings as st  # noqa: E402


def record(i, m, n, k, split, compute_ms, devices, t):
    return {
        "schema": "sgemm.timing/1", "request_id": str(i), "time": t, "shape": {"m": m, "n": n, "k": k},
        "has_c": False, "backend": "cuda", "kernel": "pingpong", "precision": "fp32", "split": split, "plan": "p",
        "receive_ms": 10.0 + i, "queue_ms": 0.5, "compute_ms": compute_ms, "send_ms": 1.0,
        "total_ms": 12.0 + i + compute_ms, "gflops": 1.0, "bytes_in": 1, "bytes_out": 1,
        "devices": [dict({"index": d, "name": "gpu", "row_begin": 0, "row_end": m, "k_begin": 0, "k_end": k,
                          "copy_in_ms": 1.0, "copy_in_wait_ms": 0.0, "kernel_ms": compute_ms * (d + 1),
                          "kernel_wait_ms": 0.1, "reduce_ms": 2.0, "reduce_wait_ms": float(i), "copy_out_ms": 1.0,
                          "copy_out_wait_ms": 0.0, "order_wait_ms": 0.0}) for d in devices],
    }


class SgemmTimingsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cls.log = os.path.join(cls.dir, "timings.jsonl")
        with open(cls.log, "w") as f:
            # 100 row splits of 4096^3 on two GPUs, compute 1..100 ms; 10 single 300x200x100 requests.
            for i in range(100):
                f.write(json.dumps(record(i, 4096, 4096, 4096, "rows", float(i + 1), [0, 1], 1000.0 + i)) + "\n")
            for i in range(10):
                f.write(json.dumps(record(i, 300, 200, 100, "single", 2.0, [0], 2000.0 + i)) + "\n")
            f.write("request id=1 this is not json\n")
            f.write(json.dumps({"schema": "other"}) + "\n")

    def run_tool(self, *args):
        out = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out

    def rows(self, *args):
        out = self.run_tool("summary", self.log, "--csv", *args)
        return {(r["class"], r["split"], r["device"], r["phase"]): r for r in csv.DictReader(io.StringIO(out.stdout))}

    def test_percentiles_per_class_split_device_and_phase(self):
        rows = self.rows()
        r = rows[("4096^3", "rows", "-", "compute")]
        self.assertEqual(r["count"], "100")
        # compute 1..100: linear interpolation gives p50 50.5, p90 90.1, p99 99.01.
        self.assertAlmostEqual(float(r["p50_ms"]), 50.5, places=3)
        self.assertAlmostEqual(float(r["p90_ms"]), 90.1, places=3)
        self.assertAlmostEqual(float(r["p99_ms"]), 99.01, places=3)
        # Device 1's kernel is twice the compute; the wait for peers is i = 0..99.
        self.assertAlmostEqual(float(rows[("4096^3", "rows", "1", "kernel")]["p50_ms"]), 101.0, places=3)
        self.assertAlmostEqual(float(rows[("4096^3", "rows", "0", "reduce_wait")]["p90_ms"]), 89.1, places=3)
        # 300x200x100 rounds up to 512x256x128, its own group.
        self.assertEqual(rows[("512x256x128", "single", "-", "total")]["count"], "10")
        self.assertNotIn(("512x256x128", "single", "1", "kernel"), rows)

    def test_since_and_last(self):
        rows = self.rows("--since", "1090")
        self.assertEqual(rows[("4096^3", "rows", "-", "total")]["count"], "10")
        self.assertEqual(rows[("512x256x128", "single", "-", "total")]["count"], "10")
        rows = self.rows("--last", "15")
        self.assertEqual(rows[("4096^3", "rows", "-", "receive")]["count"], "5")
        # The last five row splits are i = 95..99: receive 105..109, median 107.
        self.assertAlmostEqual(float(rows[("4096^3", "rows", "-", "receive")]["p50_ms"]), 107.0, places=3)

    def test_list_one_line_per_request(self):
        out = self.run_tool("list", self.log, "--csv", "--last", "3")
        rows = list(csv.DictReader(io.StringIO(out.stdout)))
        self.assertEqual([r["id"] for r in rows], ["7", "8", "9"])
        self.assertEqual(rows[0]["shape"], "300x200x100")
        self.assertAlmostEqual(float(rows[2]["total_ms"]), 12.0 + 9 + 2.0, places=3)
        self.assertAlmostEqual(float(rows[2]["reduce_wait_ms_max"]), 9.0, places=3)

    def test_skips_other_lines_and_says_so(self):
        out = self.run_tool("summary", self.log)
        self.assertIn("skipped 2 line(s)", out.stderr)
        self.assertIn("4096^3", out.stdout)

    def test_helpers(self):
        self.assertEqual(st.shape_class(4096, 4096, 4096), "4096^3")
        self.assertEqual(st.shape_class(4097, 2, 1), "8192x2x1")
        self.assertEqual(st.parse_since("2h", now=10000.0), 10000.0 - 7200)
        self.assertEqual(st.parse_since("1970-01-01T00:01:00Z"), 60.0)
        self.assertAlmostEqual(st.percentile([1, 2, 3, 4], 50), 2.5)

    def test_bad_input_is_one_line_not_a_traceback(self):
        self.notrace = os.path.join(self.dir, "notrace.json")
        with open(self.notrace, "w") as f:
            json.dump({"events": []}, f)
        for args, words in ((["summary", os.path.join(self.dir, "missing.jsonl")], "cannot read"),
                            (["list", os.path.join(self.dir, "missing.jsonl")], "No such file"),
                            (["summary", self.log, "--since", "yesterday"], "--since 'yesterday'"),
                            (["trace", os.path.join(self.dir, "missing.json")], "cannot read"),
                            (["trace", self.log], "trace"),
                            (["trace", self.notrace], "not a Chrome trace")):
            out = subprocess.run([sys.executable, TOOL] + args, capture_output=True, text=True)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertNotIn("Traceback", out.stderr)
            self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)
            self.assertIn(words, out.stderr)

    def test_png(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("python3-matplotlib is not installed (scripts/setup.sh installs it)")
        png = os.path.join(self.dir, "t.png")
        self.run_tool("summary", self.log, "--png", png)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_trace_summary_and_png(self):
        trace = os.path.join(self.dir, "trace.json")
        ev = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "GPU 0: x"}},
              {"name": "thread_name", "ph": "M", "pid": 1, "tid": 3, "args": {"name": "NCCL (comm)"}},
              {"name": "waiting for peers", "ph": "X", "pid": 1, "tid": 3, "ts": 0, "dur": 4000, "args": {}},
              {"name": "broadcast B (NCCL)", "ph": "X", "pid": 1, "tid": 3, "ts": 4000, "dur": 1500, "args": {}}]
        with open(trace, "w") as f:
            json.dump({"traceEvents": ev}, f)
        totals = st.trace_summary(trace)
        self.assertAlmostEqual(totals[("GPU 0: x", "NCCL (comm)", "waiting for peers")], 4.0)
        self.assertAlmostEqual(totals[("GPU 0: x", "NCCL (comm)", "broadcast B (NCCL)")], 1.5)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("python3-matplotlib is not installed")
        png = os.path.join(self.dir, "trace.png")
        self.run_tool("trace", trace, "--png", png)
        self.assertTrue(os.path.getsize(png) > 0)


if __name__ == "__main__":
    unittest.main()
