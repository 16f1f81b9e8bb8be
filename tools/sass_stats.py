#!/usr/bin/env python3
"""sass_stats: the SIMT mainloop's register-bank picture, from an sm_90 cubin or from cuobjdump text.

  tools/sass_stats.py kernels.cubin [--filter tma_simt_]      # nvcc -cubin -arch=sm_90a ...
  tools/sass_stats.py sass-tma-sgemm-bench.txt.gz                          # scripts/gpu-check.sh sass

The build host has nvcc and ptxas but no cuobjdump or nvdisasm, so cubins are read
directly: every 128-bit instruction's opcode is its low 12 bits (FFMA with register
operands 0x223), its registers d, a, b at bits 16, 24 and 32, c at bits 64-71, its
reuse flags at bits 122-124 and its stall count at bits 105-108. cuobjdump text
(read on the GPU machine) gives the same figures, which checks the decoding.

Per kernel: the mainloop (the largest run of FFMA with gaps of at most 64 other
instructions: the unrolled k loop), its instructions, FFMAs and stall-count sum, and
the FFMAs with two or three register operands that are read from the register file
(not the reuse cache) and fall in the same bank (register number mod 2). Each of those
costs an issue cycle; issue 14's eighth session found the whole-tile TMA kernels
1.5-2.5 points slower when ptxas's assignment had 9% more of them (docs/kernels.md).
"""
import argparse
import collections
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


def same_bank(x):
    _, a, b, c, reuse, _ = x
    regs = [r for j, r in enumerate((a, b, c)) if r != 255 and not (reuse >> j) & 1]
    banks = [r % 2 for r in regs]
    two = len(regs) >= 2 and max(banks.count(0), banks.count(1)) >= 2
    return two, len(regs) == 3 and len(set(banks)) == 1, reuse == 0


def report(name, ins):
    b, e, n = mainloop(ins)
    two = three = fresh = 0
    for x in ins[b:e]:
        if x[0] is None:
            continue
        t2, t3, f = same_bank(x)
        two += t2
        three += t3
        fresh += f
    stalls = sum(x[-1] for x in ins[b:e])
    return dict(kernel=name, instrs=len(ins), loop=e - b, ffma=n, same_bank=two, same_bank3=three, no_reuse=fresh,
                stall_sum=stalls)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="cubins, or cuobjdump -sass text (.txt or .txt.gz)")
    ap.add_argument("--filter", default="tma_simt_", help="kernels whose (mangled) names contain this")
    args = ap.parse_args()
    print("%-30s %6s %6s %6s %9s %6s %8s %9s  %s" %
          ("file", "instrs", "loop", "FFMA", "same-bank", "(3)", "no-reuse", "stall-sum", "kernel"))
    for path in args.files:
        kernels = cubin_kernels(path) if path.endswith(".cubin") else text_kernels(path)
        for name, ins in kernels:
            if args.filter not in name:
                continue
            r = report(name, ins)
            print("%-30s %6d %6d %6d %9d %6d %8d %9s  %s" %
                  (path.split("/")[-1][:30], r["instrs"], r["loop"], r["ffma"], r["same_bank"], r["same_bank3"],
                   r["no_reuse"], r["stall_sum"] if path.endswith(".cubin") else "-", name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
