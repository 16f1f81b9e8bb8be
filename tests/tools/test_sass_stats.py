#!/usr/bin/env python3
"""tools/sass_stats.py: the register-file read model (an operand comes from the reuse
cache only when the instruction just before flagged the same register in the same slot)
and --ncu on a generated Nsight Compute source-page export, checked against figures
computed here. Unit: no GPU, no cubin."""
import contextlib
import csv
import gzip
import io
import os
import sys
import tempfile
import unittest

TOOL = os.environ.get("SGEMM_SASS_STATS", os.path.join(os.path.dirname(__file__), "../../tools/sass_stats.py"))
sys.path.insert(0, os.path.dirname(os.path.abspath(TOOL)))
import sass_stats as ss  # noqa: E402

STALLS = ["stall_dispatch", "stall_selected", "stall_not_selected"]


def write_export(path, lines):
    """lines: (source text, executed, dispatch samples, selected samples)."""
    with gzip.open(path, "wt", newline="") as f:
        f.write("==WARNING== a line ncu printed before the table\n")
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Kernel Name", "test_kernel"])
        w.writerow(["Address", "Source", "Instructions Executed"] + STALLS +
                   ["stall_dispatch (Not Issued)"])
        for i, (src, ex, disp, sel) in enumerate(lines):
            w.writerow([hex(0x1000 + 16 * i), "      " + src, ex, disp, sel, 0, 0])


class RegisterReadsTest(unittest.TestCase):
    def test_flag_keeps_the_value_for_the_next_instruction(self):
        first = (10, 4, 6, 10, 0b001, 1)  # FFMA R10, R4.reuse, R6, R10
        second = (12, 4, 7, 12, 0, 1)  # FFMA R12, R4, R7, R12: R4 from the cache
        self.assertEqual(ss.register_reads(first, None), [4, 6, 10])  # the flagged one still reads R4
        self.assertEqual(ss.register_reads(second, first), [7, 12])
        # Another register in the slot, or another slot, is read from the register file.
        self.assertEqual(ss.register_reads((12, 5, 7, 12, 0, 1), first), [5, 7, 12])
        self.assertEqual(ss.register_reads((12, 6, 4, 12, 0, 1), first), [6, 4, 12])
        self.assertEqual(ss.register_reads((12, 255, 7, 12, 0, 1), None), [7, 12])  # RZ is no read

    def test_same_bank(self):
        # R7 (odd) and R12 (even) read: distinct banks; R7 and R9: one bank.
        self.assertEqual(ss.same_bank((12, 4, 7, 12, 0, 1), (10, 4, 6, 10, 1, 1)), (False, False, False))
        self.assertEqual(ss.same_bank((9, 4, 7, 9, 0, 1), (10, 4, 6, 10, 1, 1)), (True, False, False))
        self.assertEqual(ss.same_bank((9, 3, 7, 9, 0, 1), None), (True, True, True))


class NcuSourceTest(unittest.TestCase):
    def test_report(self):
        lines = [("LDS.128 R4, [R2]", 1000, 50, 10)]
        # A run of FFMAs: R4 kept for the next one, as hand-scheduled code would (inferred flags).
        lines += [("FFMA R%d, R4, R%d, R%d" % (10 + j, 6 + j, 10 + j), 1000000, 10 * (j + 1), 5) for j in range(4)]
        lines += [("FFMA R21, R5, R7, R9", 1000000, 100, 5), ("@!P0 BRA 0x10", 500, 7, 1)]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ncu-source-test.csv.gz")
            write_export(path, lines)
            kernel, rows = ss.ncu_rows(path)
            self.assertEqual(kernel, "test_kernel")
            self.assertEqual([r["op"] for r in rows], ["LDS", "FFMA", "FFMA", "FFMA", "FFMA", "FFMA", "BRA"])
            self.assertEqual(rows[1]["ffma"], (10, 4, 6, 10))
            self.assertIsNone(rows[0]["ffma"])
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(ss.ncu_report(path), 0)
            text = out.getvalue()
        # Dispatch samples: 50 + 10+20+30+40 + 100 + 7 = 257 of 257 + 5*5 + 10 + 1 = 293.
        self.assertIn("dispatch %.1f%%" % (100.0 * 257 / 293), text)
        # FFMA: (10+20+30+40+100) samples per 5e6 executed = 40 per million.
        self.assertRegex(text, r"FFMA\s+40\.00\s+\(")
        # The first FFMA reads R4, R6 and R10 (all even) and the last R5, R7 and R9 (all odd): 3 in one
        # bank, (10 + 100) / 2e6. The three between take R4 from the cache and read R(6+j) and R(10+j),
        # both odd or both even: 2 in one bank, in place, (20 + 30 + 40) / 3e6.
        self.assertRegex(text, r"3 reads, 3 in one bank\s+all\s+2 FFMAs\s+55\.00")
        self.assertRegex(text, r"2 reads, 2 in one bank\s+in place\s+3 FFMAs\s+30\.00")
        self.assertRegex(text, r"all\s+all\s+5 FFMAs\s+40\.00")


if __name__ == "__main__":
    unittest.main()
