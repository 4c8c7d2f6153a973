#!/usr/bin/env python3
"""A static bound on the stack of a function of a linked Thumb-2 image, from its disassembly.

    embedded/stack-bound.py ELF SYMBOL [--objdump llvm-objdump] [--nm llvm-nm] [--why]

SYMBOL is a substring of one function's demangled name (e.g. `meter::step_once`). Prints
`stack bound of <function>: B bytes` and with --why the deepest call chain, frame by
frame. Exits with failure, naming the cause, where no bound can be argued: a call through
a register (indirect call), recursion, or an instruction that moves SP in a way this
script does not read, reachable from the function.

The bound. The stable compiler has no stack-size section (`-Z emit-stack-sizes` is
nightly-only, and `-C llvm-args=--stack-size-section` is not read by rustc's code
generator), so every function's frame is read from its own instructions: the sum of every
instruction that lowers SP anywhere in the function (`push`, `vpush`, `sub sp, #imm`,
`str/strd ..., [sp, #-imm]!`). LLVM reserves a function's whole frame, outgoing call
arguments included, in its prologue (no `alloca` in this code: an SP write from a register
other than the frame pointer would be refused below), so the sum is at least the deepest
SP of the function, wherever the prologue was placed (shrink-wrapping) and whichever path
runs. A function's bound is its frame plus the largest bound of the functions it calls
(`bl`, `blx #imm`) or jumps to (`b`/`b.w` outside its own range: a tail call, counted as a
call with the caller's frame still on the stack, which over-counts). Functions are taken
from the symbol table (address and size); the bound covers every path of the call graph,
taken or not.
"""

import re
import os
import subprocess
import sys


def die(msg):
    print(f"stack-bound: {msg}", file=sys.stderr)
    sys.exit(1)


args = [a for a in sys.argv[1:] if not a.startswith("--")]
opts = sys.argv[1:]
if len(args) < 2:
    die("usage: stack-bound.py ELF SYMBOL [--objdump PATH] [--nm PATH] [--why]")
elf, wanted = args[0], args[1]
if not os.path.isfile(elf):
    die(f"no image at {elf}: build it first (see docs/benchmarks.md, \"Static stack bound\"; "
        "with CARGO_TARGET_DIR set, the image is under that directory)")


def opt(name, default):
    if name in opts:
        i = opts.index(name)
        return opts[i + 1]
    return default


objdump = opt("--objdump", "llvm-objdump")
nm = opt("--nm", "llvm-nm")
args = [a for a in args if a not in (objdump, nm)]
why = "--why" in opts

# Functions: (start, end, name) from the symbol table, text symbols with a size.
funcs = []
for line in subprocess.run([nm, "-C", "-S", "--defined-only", elf], capture_output=True,
                           text=True, check=True).stdout.splitlines():
    parts = line.split(None, 3)
    if len(parts) == 4 and parts[2] in "tTW" and int(parts[1], 16) > 0:
        start = int(parts[0], 16) & ~1
        funcs.append((start, start + int(parts[1], 16), parts[3]))
funcs.sort()
starts = {}
for s, e, n in funcs:
    # Aliases (two names, one address): keep the first.
    starts.setdefault(s, (e, n))


def func_at(addr):
    """The function whose range holds addr (None if none)."""
    lo, hi = 0, len(funcs)
    while lo < hi:
        mid = (lo + hi) // 2
        if funcs[mid][0] <= addr:
            lo = mid + 1
        else:
            hi = mid
    if lo and funcs[lo - 1][0] <= addr < funcs[lo - 1][1]:
        return funcs[lo - 1][0]
    return None


INS = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
TARGET = re.compile(r"^(?:0x)?([0-9a-f]+)(?:\s|$)")
REGS = re.compile(r"\{([^}]*)\}")


def reg_count(lst):
    n = 0
    for r in lst.split(","):
        r = r.strip()
        m = re.match(r"^([rds])(\d+)-[rds](\d+)$", r)
        n += int(m.group(3)) - int(m.group(2)) + 1 if m else 1
    return n


frame = {}      # function start -> bytes
calls = {}      # function start -> set of callee starts
problems = {}   # function start -> [reasons]
dis = subprocess.run([objdump, "-d", "--no-show-raw-insn", elf], capture_output=True,
                     text=True, check=True).stdout
for line in dis.splitlines():
    m = INS.match(line)
    if not m:
        continue
    addr, mnem, ops = int(m.group(1), 16), m.group(2), m.group(3).split("@")[0].strip()
    f = func_at(addr)
    if f is None:
        continue
    frame.setdefault(f, 0)
    calls.setdefault(f, set())
    base = mnem.split(".")[0]
    if base in ("push", "stmdb") and (base == "push" or ops.startswith("sp!")):
        frame[f] += 4 * reg_count(REGS.search(ops).group(1))
    elif base == "vpush":
        regs = REGS.search(ops).group(1)
        frame[f] += (8 if regs.strip().startswith("d") else 4) * reg_count(regs)
    elif re.match(r"^sub[sw]?$", base) and re.match(r"^sp, (sp, )?#\d+$", ops):
        frame[f] += int(ops.split("#")[1])
    elif base in ("str", "strd", "strb", "strh") and re.search(r"\[sp, #-(\d+)\]!$", ops):
        frame[f] += int(re.search(r"\[sp, #-(\d+)\]!$", ops).group(1))
    elif re.match(r"^sp\b", ops) and not (
        base in ("add", "addw", "cmp")  # raise SP by an immediate, or only read it
        or (base.startswith("stm") and not ops.startswith("sp!"))  # store below SP
    ):
        # Another write to SP: `mov sp, r7` / `sub sp, r7, #imm` restore it from the frame
        # pointer (they raise SP back into the frame); anything else is not read here.
        if not (re.match(r"^sp, r7(, #\d+)?$", ops) and base in ("mov", "sub")):
            problems.setdefault(f, []).append(f"{addr:#x}: {mnem} {ops}")
    if base in ("bl", "blx", "b") or re.match(r"^b(eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le)$", base):
        t = TARGET.match(ops)
        if t:
            dest = int(t.group(1), 16) & ~1
            g = func_at(dest)
            if base in ("bl", "blx"):
                if g is None:
                    problems.setdefault(f, []).append(f"{addr:#x}: call to {dest:#x}, no function there")
                else:
                    calls[f].add(g)
            elif g != f:
                if g is None:
                    problems.setdefault(f, []).append(f"{addr:#x}: jump to {dest:#x}, no function there")
                else:
                    calls[f].add(g)
        elif base == "blx" or (base == "bx" and ops != "lr"):
            problems.setdefault(f, []).append(f"{addr:#x}: indirect call `{mnem} {ops}`")
    elif base == "bx" and ops != "lr":
        problems.setdefault(f, []).append(f"{addr:#x}: indirect jump `{mnem} {ops}`")
    elif base in ("mov", "ldr") and re.match(r"^pc\b", ops):
        problems.setdefault(f, []).append(f"{addr:#x}: indirect jump `{mnem} {ops}`")

entry = [s for s, (e, n) in starts.items() if wanted in n]
if len(entry) != 1:
    die(f"{len(entry)} functions match {wanted!r}: " + "; ".join(starts[s][1] for s in entry[:5]))
entry = entry[0]

bound = {}
best = {}
ON_PATH = object()


def solve(f, path):
    if f in bound:
        if bound[f] is ON_PATH:
            die("recursion: " + " -> ".join(starts[g][1] for g in path + [f]))
        return bound[f]
    if f in problems:
        die(f"{starts[f][1]}: " + "; ".join(problems[f][:3]) + " (reached by "
            + " -> ".join(starts[g][1] for g in path + [f]) + ")")
    bound[f] = ON_PATH
    deepest, via = 0, None
    for g in sorted(calls.get(f, ())):
        b = solve(g, path + [f])
        if b > deepest:
            deepest, via = b, g
    bound[f] = frame.get(f, 0) + deepest
    best[f] = via
    return bound[f]


total = solve(entry, [])
print(f"stack bound of {starts[entry][1]}: {total} bytes ({len(bound)} functions reachable)")
if why:
    f = entry
    while f is not None:
        print(f"  {frame.get(f, 0):5} {starts[f][1]}")
        f = best.get(f)
