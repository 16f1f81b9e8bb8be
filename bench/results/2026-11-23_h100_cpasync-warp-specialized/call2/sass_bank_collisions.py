"""Issue 14, sixth pass: per ring-tile kernel in a `cuobjdump -sass` dump (gzip), the FFMAs and
how many have two (or three) non-reused register sources in the same register bank (number mod 2),
the operand collisions behind the "dispatch" stalls (fifth pass). Whole functions, not one stage.
usage: python3 sass_bank_collisions.py sass.txt.gz ..."""
import gzip,re,sys
def funcs(path):
    cur=None; out={}
    for line in gzip.open(path,'rt'):
        m=re.search(r'Function : (\S+)',line)
        if m: cur=m.group(1); out[cur]=[]; continue
        if cur: out[cur].append(line)
    return out
def analyse(lines):
    # FFMAs with 2+ non-reused register sources in the same bank (reg % 2), and all 3
    ff=0; two=0; three=0
    for l in lines:
        m=re.search(r'FFMA (R\d+), (\S+), (\S+), (\S+) ;',l)
        if not m: continue
        ff+=1
        srcs=[m.group(i) for i in (2,3,4)]
        regs=[]
        for s in srcs:
            r=re.match(r'-?\|?R(\d+)(\.reuse)?',s)
            if r and not r.group(2): regs.append(int(r.group(1)))
        banks=[r%2 for r in regs]
        if len(regs)>=2 and (banks.count(0)>=2 or banks.count(1)>=2): two+=1
        if len(regs)==3 and len(set(banks))==1: three+=1
    return ff,two,three
for path in sys.argv[1:]:
    for f,lines in funcs(path).items():
        if 'Li2ELi2ELi8ELi4ELi8ELi16ELi3E' not in f: continue
        tag=re.search(r'Li2EEE(L.*?)EEv', f); print(path, tag.group(1) if tag else f[-40:], 'FFMA, 2 same-bank non-reused sources, 3 same-bank:', analyse(lines))
