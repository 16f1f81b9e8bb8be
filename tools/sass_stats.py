#!/usr/bin/env python3
"""sass_stats: the SIMT mainloop's register-bank picture, from an sm_90 cubin or from cuobjdump text.

  tools/sass_stats.py kernels.cubin [--filter tma_simt_]      # nvcc -cubin -arch=sm_90a ...
  tools/sass_stats.py sass-tma-sgemm-bench.txt.gz                          # scripts/gpu-check.sh sass
  tools/sass_stats.py --ncu ncu-source-ours-4096.csv.gz [--cubin kernels.cubin]  # gpu-check.sh ncu-source

The build host has nvcc and ptxas but no cuobjdump or nvdisasm, so cubins are read
directly: every 128-bit instruction's opcode is its low 12 bits (FFMA with register
operands 0x223), its registers d, a, b at bits 16, 24 and 32, c at bits 64-71, its
reuse flags at bits 122-124 and its stall count at bits 105-108. cuobjdump text
(read on the GPU machine) gives the same figures, which checks the decoding.

Per kernel: the mainloop (the largest run of FFMA with gaps of at most 64 other
instructions: the unrolled k loop), its instructions, FFMAs and stall-count sum, and
the FFMAs with two or three register operands that are read from the register file
and fall in the same bank (register number mod 2). An operand comes from the reuse
cache when the instruction just before it set the reuse flag on the same slot for the
same register (the flag keeps the value for the next instruction; the flagged
instruction itself still reads the register file).

--ncu reads the per-instruction export of Nsight Compute's source page (`ncu -i REP
--page source --print-source sass --csv`, gzipped): the stall reasons of all samples,
dispatch-stall samples per million executed instructions by opcode, and the mainloop
FFMAs grouped by what they read from the register file (same bank or not, in place or
with the accumulator moved to another register), each group's dispatch-stall samples
per FFMA. Nsight's SASS text has no reuse flags: --cubin takes them from the kernel's
cubin (the same instructions, checked), else an operand counts as cached when the
previous FFMA read the same register in the same slot (how hand-scheduled code uses
the cache).
"""
import argparse
import collections
import csv
import gzip
import re
import struct
import sys

FFMA = 0x223


# ---- cubins ----------------------------------------------------------------
def cubin_kernels(path):
    """(kernel name, [(d, a, b, c, reuse, stall) or None for a non-FFMA]) per .text section."""
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]
    for name_off, _, _, _, off, size in headers:
        name = data[strtab + name_off:data.index(b"\0", strtab + name_off)].decode()
        if not name.startswith(".text."):
            continue
        ins = []
        for i in range(off, off + size, 16):
            lo, hi = struct.unpack_from("<QQ", data, i)
            stall = (hi >> 41) & 0xF
            if lo & 0xFFF == FFMA:
                ins.append(((lo >> 16) & 0xFF, (lo >> 24) & 0xFF, (lo >> 32) & 0xFF, hi & 0xFF, (hi >> 58) & 0x7, stall))
            else:
                ins.append((None, stall))
        yield name[len(".text."):], ins


# ---- cuobjdump -sass text ---------------------------------------------------
REG = r"(-?\|?R(\d+)\|?(\.reuse)?)"
FFMA_RE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(@!?P\d\s+)?FFMA(\.\w+)* R(\d+), " + REG + ", " + REG + ", " + REG + r"\s*;")


def text_kernels(path):
    opener = gzip.open if path.endswith(".gz") else open
    name, ins = None, []
    for line in opener(path, "rt"):
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, ins
            name, ins = m.group(1), []
            continue
        if name is None or not re.match(r"^\s*/\*[0-9a-f]{4,}\*/", line):
            continue
        f = FFMA_RE.match(line)
        if f:
            regs = [int(f.group(i)) for i in (5, 8, 11)]
            reuse = sum(1 << j for j, g in enumerate((6, 9, 12)) if f.group(g))
            ins.append((int(f.group(3)), regs[0], regs[1], regs[2], reuse, 0))
        else:
            ins.append((None, 0))
    if name:
        yield name, ins


# ---- the statistics ---------------------------------------------------------
def mainloop(ins):
    idx = [i for i, x in enumerate(ins) if x[0] is not None]
    if not idx:
        return 0, 0, 0
    runs, cur = [], [idx[0]]
    for i in idx[1:]:
        if i - cur[-1] > 64:
            runs.append(cur)
            cur = [i]
        else:
            cur.append(i)
    runs.append(cur)
    big = max(runs, key=len)
    return big[0], big[-1] + 1, len(big)


def register_reads(x, prev):
    """The FFMA x's source registers read from the register file: not RZ (255), and not
    kept in the reuse cache by the instruction just before (prev, None if not an FFMA)."""
    _, a, b, c, _, _ = x
    return [r for j, r in enumerate((a, b, c))
            if r != 255 and not (prev is not None and (prev[4] >> j) & 1 and prev[1 + j] == r)]


def same_bank(x, prev):
    regs = register_reads(x, prev)
    banks = [r % 2 for r in regs]
    two = len(regs) >= 2 and max(banks.count(0), banks.count(1)) >= 2
    return two, len(regs) == 3 and len(set(banks)) == 1, len(regs) == 3


def report(name, ins):
    b, e, n = mainloop(ins)
    two = three = fresh = 0
    prev = None
    for x in ins[b:e]:
        if x[0] is None:
            prev = None
            continue
        t2, t3, f = same_bank(x, prev)
        prev = x
        two += t2
        three += t3
        fresh += f
    stalls = sum(x[-1] for x in ins[b:e])
    return dict(kernel=name, instrs=len(ins), loop=e - b, ffma=n, same_bank=two, same_bank3=three, reads3=fresh,
                stall_sum=stalls)


# ---- Nsight Compute's source page ---------------------------------------------
NCU_FFMA_RE = re.compile(r"^(@!?U?P\w+\s+)?FFMA(\.\w+)*\s+R(\d+|Z),\s*(.*?)\s*;?$")


def ncu_rows(path):
    """(kernel name, [dict(op, src, exec, stalls, ffma)]) from a gzipped source-page CSV;
    ffma is (d, a, b, c) for an FFMA of register operands (RZ as 255), else None."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    # Lines ncu printed around the table (warnings) are skipped: the table starts at its header.
    kernel = next((r[1] for r in rows if len(r) > 1 and r[0] == "Kernel Name"), "?")
    start = next(i for i, r in enumerate(rows) if r[:2] == ["Address", "Source"])
    hdr = rows[start]
    col = {h: i for i, h in enumerate(hdr)}
    stall_cols = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    out = []
    for r in rows[start + 1:]:
        if len(r) < len(hdr):
            continue
        src = r[col["Source"]].strip()
        toks = src.split()
        if not toks:
            continue
        op = (toks[1] if toks[0].startswith("@") and len(toks) > 1 else toks[0]).split(".")[0]
        ffma = None
        m = NCU_FFMA_RE.match(src)
        if m:
            regs = []
            for o in ["R" + m.group(3)] + [x.strip() for x in m.group(4).split(",")]:
                g = re.fullmatch(r"-?\|?R(\d+|Z)\|?", o)
                regs.append(None if g is None else (255 if g.group(1) == "Z" else int(g.group(1))))
            if len(regs) == 4 and None not in regs:
                ffma = tuple(regs)
        out.append(dict(op=op, src=src, exec=int(r[col["Instructions Executed"]] or 0),
                        stalls={h: int(r[col[h]] or 0) for h in stall_cols}, ffma=ffma))
    return kernel, out


def reuse_from_cubin(rows, cubin):
    """The reuse flags of the rows' instructions from the cubin kernel with the same FFMAs, or None."""
    want = [x["ffma"] for x in rows if x["ffma"] is not None]
    for _, ins in cubin_kernels(cubin):
        if len(ins) == len(rows) and [x[:4] for x in ins if x[0] is not None] == want:
            return [x[4] if x[0] is not None else 0 for x in ins]
    return None


def ncu_report(path, cubin=None):
    kernel, rows = ncu_rows(path)
    reuse = reuse_from_cubin(rows, cubin) if cubin else None
    if reuse is None:  # as hand-scheduled code would: keep what the next FFMA reads in the same slot
        reuse = []
        for i, x in enumerate(rows):
            nxt = rows[i + 1]["ffma"] if i + 1 < len(rows) else None
            reuse.append(sum(1 << j for j in range(3) if x["ffma"] and nxt and x["ffma"][1 + j] == nxt[1 + j]))
    print("%s\n  %s; reuse flags %s" % (path, kernel[:150], "from " + cubin if cubin and reuse else "inferred"))
    total = collections.Counter()
    for x in rows:
        total.update(x["stalls"])
    samples = sum(total.values()) or 1
    print("  samples by stall reason: " + ", ".join("%s %.1f%%" % (k[6:], 100.0 * v / samples)
                                                    for k, v in total.most_common(8)))
    by_op = collections.defaultdict(lambda: [0, 0])
    for x in rows:
        by_op[x["op"]][0] += x["exec"]
        by_op[x["op"]][1] += x["stalls"].get("stall_dispatch", 0)
    executed = sum(v[0] for v in by_op.values()) or 1
    print("  dispatch-stall samples per million executed, by opcode (share of executed):")
    for op, (ex, d) in sorted(by_op.items(), key=lambda kv: -kv[1][1])[:6]:
        print("    %-8s %8.2f  (%.1f%%)" % (op, 1e6 * d / max(ex, 1), 100.0 * ex / executed))
    ins = [(x["ffma"] + (reuse[i], 0)) if x["ffma"] else (None, 0) for i, x in enumerate(rows)]
    b, e, n = mainloop(ins)
    groups = collections.defaultdict(lambda: [0, 0, 0])
    prev = None
    for i in range(b, e):
        x = ins[i]
        if x[0] is None:
            prev = None
            continue
        regs = register_reads(x, prev)
        prev = x
        worst = max(collections.Counter(r % 2 for r in regs).values()) if regs else 0
        reads = "%d reads, %s" % (len(regs), "distinct banks" if worst <= 1 else "%d in one bank" % worst)
        move = "in place" if x[0] == x[3] else "moved"
        for key in ((reads, move), (reads, "all"), ("all", "all")):
            g = groups[key]
            g[0] += 1
            g[1] += rows[i]["exec"]
            g[2] += rows[i]["stalls"].get("stall_dispatch", 0)
    print("  mainloop FFMAs (%d): dispatch-stall samples per million executed, by register-file reads:" % n)
    for (reads, move), (cnt, ex, d) in sorted(groups.items()):
        print("    %-28s %-9s %5d FFMAs  %8.2f" % (reads, move, cnt, 1e6 * d / max(ex, 1)))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="cubins, or cuobjdump -sass text (.txt or .txt.gz), or with --ncu "
                    "Nsight Compute source-page CSVs (.csv.gz)")
    ap.add_argument("--filter", default="tma_simt_", help="kernels whose (mangled) names contain this")
    ap.add_argument("--ncu", action="store_true", help="the files are ncu source-page exports (gpu-check.sh ncu-source)")
    ap.add_argument("--cubin", help="with --ncu: the cubin that holds the profiled kernel (its reuse flags)")
    args = ap.parse_args()
    if args.ncu:
        for path in args.files:
            ncu_report(path, args.cubin)
        return 0
    print("%-30s %6s %6s %6s %9s %6s %8s %9s  %s" %
          ("file", "instrs", "loop", "FFMA", "same-bank", "(3)", "3-reads", "stall-sum", "kernel"))
    for path in args.files:
        kernels = cubin_kernels(path) if path.endswith(".cubin") else text_kernels(path)
        for name, ins in kernels:
            if args.filter not in name:
                continue
            r = report(name, ins)
            print("%-30s %6d %6d %6d %9d %6d %8d %9s  %s" %
                  (path.split("/")[-1][:30], r["instrs"], r["loop"], r["ffma"], r["same_bank"], r["same_bank3"],
                   r["reads3"], r["stall_sum"] if path.endswith(".cubin") else "-", name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
