#!/usr/bin/env python3
"""Module-level import cycles of one crate, from `cargo modules dependencies` (DOT on stdin).

cargo-modules draws every item (modules, types, functions) with "owns" and "uses" edges;
its own `--acyclic` works on items, where a method that names its own type is already a
cycle. Here every item is replaced by the module that contains it, edges between a module
and its own ancestors (a child using `super::X`, a parent re-exporting a child's item) are
left out, and the strongly connected components of what remains are the cycles: two
modules that each use something of the other, directly or around a longer loop.

Prints each cycle on one line and exits 1 if there is one; exits 0 otherwise.
"""
import re
import sys

NODE = re.compile(r'^\s*"([^"]+)" \[label="([^"|]*)\|')
EDGE = re.compile(r'^\s*"([^"]+)" -> "([^"]+)" \[label="uses"')

kinds = {}
uses = []
for line in sys.stdin:
    m = NODE.match(line)
    if m:
        kinds[m.group(1)] = m.group(2).split()[-1]
        continue
    m = EDGE.match(line)
    if m:
        uses.append((m.group(1), m.group(2)))

def module_of(path):
    """The nearest enclosing module (or crate) of an item path."""
    while path:
        if kinds.get(path) in ("mod", "crate"):
            return path
        if "::" not in path:
            return path
        path = path.rsplit("::", 1)[0]
    return path

def related(a, b):
    return a == b or a.startswith(b + "::") or b.startswith(a + "::")

graph = {}
for a, b in uses:
    ma, mb = module_of(a), module_of(b)
    if not related(ma, mb):
        graph.setdefault(ma, set()).add(mb)
        graph.setdefault(mb, set())

# Tarjan's strongly connected components, iteratively.
index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
for root in sorted(graph):
    if root in index:
        continue
    work = [(root, iter(sorted(graph[root])))]
    index[root] = low[root] = counter[0]
    counter[0] += 1
    stack.append(root)
    on.add(root)
    while work:
        v, it = work[-1]
        for w in it:
            if w not in index:
                index[w] = low[w] = counter[0]
                counter[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph[w]))))
                break
            if w in on:
                low[v] = min(low[v], index[w])
        else:
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                scc = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    scc.append(w)
                    if w == v:
                        break
                if len(scc) > 1:
                    sccs.append(sorted(scc))

for scc in sccs:
    print("module cycle: " + " <-> ".join(scc))
sys.exit(1 if sccs else 0)
