#!/usr/bin/env python3
"""Statement deletions: delete, one at a time, each simple statement (a call, an
assignment, an early return, a `?` call) of the token engine's rule-applying functions and
run the checks; cargo-mutants replaces function bodies and operators but deletes no call
or assignment.

    python3 spec/mutants/statements.py [--only N,M] [--list] OUT_DIR

Run it from a clean worktree at a fixed commit (it edits the sources in place and puts
each file back). Files: kernel/src/token/node.rs (outside its unit-test module) and
kernel/src/token/site.rs. A `let` binding is not deleted (the code would not build).

Each deletion goes through the checks in order, stopping at the first that fails:
  1. build          `cargo build -p hilock-kernel`        (fails: unviable)
  2. kernel         `cargo test -p hilock-kernel --lib --test ...` (HILOCK_CASES=150;
                    the ten test targets that drive the token engine)
  3. spec           `cargo test -p hilock-spec`            (thesis scenarios, robustness)
  4. verify         `cargo test -p verify --test token|inversion|prio_rules` with
                    HILOCK_PINS=off (no pinned count can turn it red)
  5. kernel-all     `cargo test -p hilock-kernel`           (every target, doctests)
A deletion that passes all five is missed; one whose check runs longer than its limit (four
times the check on the unmutated tree, 5 to 20 minutes) is stopped and reported "hang": a
loop that no longer ends (a test run that never finishes is red in practice; the docs count
it apart). Results: OUT_DIR/results.tsv (one line per
deletion: id, file, line, verdict, the check that caught it, the statement) and
OUT_DIR/summary.txt.
"""
import os, re, subprocess, sys, time

FILES = ["kernel/src/token/node.rs", "kernel/src/token/site.rs"]
KEYWORDS = ("let ", "if ", "} else", "else ", "match ", "for ", "while ", "loop ", "fn ",
            "pub ", "impl ", "use ", "//", "#[", "}", "{", "const ", "type ", "struct ",
            "enum ", "mod ", "where", "unsafe")
# The kernel's test targets that drive the token engine; the others (agents, bakery, ring,
# tree, the baselines) cannot see a deletion in it. A deletion that passes every check is
# run once more through the kernel's whole suite, doctests included ("kernel-all"), before
# it is called missed.
TOKEN_TESTS = ["api", "codec", "forwarding_and_pcep", "keep_intention", "node_paths",
               "output_order", "prio", "recovery", "rules", "try_lock"]
CHECKS = [
    ("build", ["cargo", "build", "-q", "-p", "hilock-kernel", "--lib"]),
    ("kernel", ["cargo", "test", "-q", "-p", "hilock-kernel", "--lib"]
     + [a for t in TOKEN_TESTS for a in ("--test", t)]),
    ("spec", ["cargo", "test", "-q", "-p", "hilock-spec"]),
    ("verify", ["cargo", "test", "-q", "-p", "verify", "--test", "token", "--test",
                "inversion", "--test", "prio_rules"]),
    ("kernel-all", ["cargo", "test", "-q", "-p", "hilock-kernel"]),
]


def statements(path):
    """(first line, last line) of each simple statement, 0-based, inclusive."""
    lines = open(path).read().split("\n")
    end = len(lines)
    for i, l in enumerate(lines):
        if l.startswith("#[cfg(test)]"):
            end = i
            break
    out, i = [], 0
    while i < end:
        s = lines[i].strip()
        prev = lines[i - 1].strip() if i else ""
        starts = (s and not s.startswith(KEYWORDS) and not s.startswith(("///", "*"))
                  and (prev.endswith(("{", ";", "}", "*/")) or prev.startswith("//")
                       or prev == ""))
        if not starts:
            i += 1
            continue
        depth, j = 0, i
        while j < end:
            t = re.sub(r'"(?:[^"\\]|\\.)*"', '""', lines[j].split("//")[0])
            depth += t.count("(") + t.count("[") + t.count("{")
            depth -= t.count(")") + t.count("]") + t.count("}")
            if depth <= 0 and t.rstrip().endswith(";"):
                break
            if depth < 0:
                j = end
                break
            j += 1
        if j < end and depth == 0:
            out.append((i, j))
            i = j + 1
        else:
            i += 1
    return out


# A check that runs longer than its limit is stopped with its whole process group (the
# test binaries cargo started included) and the deletion is reported "hang": the limit is
# four times the check's time on the unmutated tree (its first run, builds included), at
# least 5 and at most 20 minutes, so a deleted statement that makes a loop run for ever is
# told apart from a slow check.
LIMIT_S = 20 * 60
MIN_LIMIT_S = 5 * 60


def run(cmd, env, limit=LIMIT_S):
    """(passed, seconds); passed is None when the check ran out of time."""
    t = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        code = p.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.wait()
        return None, time.time() - t
    return code == 0, time.time() - t


def main():
    args = sys.argv[1:]
    only = None
    if "--only" in args:
        k = args.index("--only")
        only = {int(x) for x in args[k + 1].split(",")}
        del args[k:k + 2]
    listing = "--list" in args
    args = [a for a in args if a != "--list"]
    if any(a.startswith("-") for a in args) or (not listing and len(args) != 1):
        sys.exit(__doc__.split("\n\n")[1])
    if not listing and subprocess.run(["git", "diff", "--quiet", "--"] + FILES).returncode != 0:
        sys.exit("the token engine's sources have uncommitted changes; run from a clean worktree")
    todo = []
    for f in FILES:
        for (a, b) in statements(f):
            todo.append((f, a, b))
    if listing:
        for n, (f, a, b) in enumerate(todo):
            text = " ".join(l.strip() for l in open(f).read().split("\n")[a:b + 1])
            print(f"{n}\t{f}:{a + 1}\t{text}")
        return
    out_dir = args[0]
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, HILOCK_CASES="150", HILOCK_PINS="off", CARGO_TERM_COLOR="never")
    limits = {}
    for name, cmd in CHECKS:
        ok, t = run(cmd, env)
        if ok is not True:
            sys.exit(f"the unmutated tree fails `{' '.join(cmd)}`")
        limits[name] = min(LIMIT_S, max(MIN_LIMIT_S, 4 * t))
    res = open(os.path.join(out_dir, "results.tsv"), "a")
    counts = {}
    for n, (f, a, b) in enumerate(todo):
        if only is not None and n not in only:
            continue
        src = open(f).read()
        lines = src.split("\n")
        text = " ".join(l.strip() for l in lines[a:b + 1])
        mutated = "\n".join(lines[:a] + lines[b + 1:])
        verdict, by, secs = "missed", "-", 0.0
        try:
            open(f, "w").write(mutated)
            for name, cmd in CHECKS:
                ok, t = run(cmd, env, limits[name])
                secs += t
                if ok is None:
                    verdict, by = "hang", name
                    break
                if not ok:
                    verdict, by = ("unviable", "build") if name == "build" else ("caught", name)
                    break
        finally:
            open(f, "w").write(src)
            # A failing proptest saves its seed beside the test; it belongs to the mutant.
            subprocess.run(["git", "checkout", "-q", "--", "*.proptest-regressions"])
            subprocess.run(["git", "clean", "-q", "-f", "--", "*.proptest-regressions"])
        counts[(verdict, by)] = counts.get((verdict, by), 0) + 1
        res.write(f"{n}\t{f}:{a + 1}\t{verdict}\t{by}\t{secs:.0f}s\t{text}\n")
        res.flush()
        print(f"{n}/{len(todo)} {f}:{a + 1} {verdict} {by} {secs:.0f}s  {text[:70]}", flush=True)
    with open(os.path.join(out_dir, "summary.txt"), "w") as s:
        for (v, by), c in sorted(counts.items()):
            s.write(f"{v}\t{by}\t{c}\n")


if __name__ == "__main__":
    main()
