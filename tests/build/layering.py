#!/usr/bin/env python3
"""The folder graph of Kiln's per-stage archives, from their symbols.

usage: layering.py BUILD_DIR [TOOLS_OBJECT ...]

For every undefined symbol of an object in libkiln_<stage>.a (and the
kiln command's objects, stage "tools"), the stage whose archive defines it
gives an edge stage -> definer. Each edge must go down the stage order
(base <- ir <- {frontend, passes} <- codegen <- plan <- runtime <- driver
<- tools, runtime itself the sub-stages files <- cpu <- observe <- data
<- comm <- exec <- ckpt, with data and comm beside each other and data
below any backend); an edge that goes up, or sideways, is a failure, and
so is any cycle between stages. Inside one stage, the objects' graph has
no cycle either (files that call each other back and forth), but for the
few listed in KNOWN_CYCLES."""
import collections
import os
import subprocess
import sys

RUNTIME = {"plan", "codegen", "ir", "base"}
BELOW = {
    "base": set(),
    "ir": {"base"},
    "frontend": {"ir", "base"},
    "passes": {"ir", "base"},
    "codegen": {"ir", "base"},
    "plan": {"codegen", "ir", "base"},
    "runtime_files": {"base"},
    "runtime_cpu": {"runtime_files"} | RUNTIME,
    "runtime_observe": {"runtime_cpu", "runtime_files"} | RUNTIME,
    # data sets and the loader need no backend, no collective, no kernel
    "runtime_data": {"runtime_files"} | RUNTIME,
    "runtime_comm": RUNTIME,
    "runtime_exec": {"runtime_comm", "runtime_data", "runtime_observe", "runtime_cpu", "runtime_files"} | RUNTIME,
    "runtime_ckpt": {"runtime_exec", "runtime_comm", "runtime_data", "runtime_observe", "runtime_cpu",
                     "runtime_files"} | RUNTIME,
}
BELOW["driver"] = {"runtime_ckpt", "passes", "frontend"} | BELOW["runtime_ckpt"]
BELOW["tools"] = {"driver"} | BELOW["driver"]

# Cycles between the objects of one stage that are allowed for now: each
# is one piece of work spread over files that call each other (a lowering
# and its helpers).
KNOWN_CYCLES = [
    {"ir/ops.c.o", "ir/shape.c.o"},
    {"frontend/lower.c.o", "frontend/lower_call.c.o", "frontend/lower_expr.c.o", "frontend/lower_stmt.c.o"},
    {"plan/conv.c.o", "plan/lt_epilogue.c.o", "plan/plan.c.o"},
]


def symbols(path):
    """(member, kind, name) for every global symbol of an archive or object."""
    out = subprocess.run(["nm", "-A", "-g", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if path.endswith(".a"):
            _, member, rest = line.split(":", 2)
        else:
            member, rest = line.split(":", 1)
        parts = rest.split()
        if len(parts) == 2 and parts[0] == "U":
            yield member, "U", parts[1]
        elif len(parts) == 3 and parts[1] in "TDBRVWCGS":
            yield member, "D", parts[2]


def main():
    build = sys.argv[1]
    sys.setrecursionlimit(10000)
    inputs = [(s, os.path.join(build, f"libkiln_{s}.a")) for s in BELOW if s != "tools"]
    inputs += [("tools", o) for o in sys.argv[2:]]
    defs, undefs = {}, collections.defaultdict(list)
    for stage, path in inputs:
        if not os.path.exists(path):
            print(f"FAIL: {path} is missing")
            return 1
        for member, kind, name in symbols(path):
            member = f"{stage}/{os.path.basename(member)}"
            if kind == "D":
                defs.setdefault(name, (stage, member))
            else:
                undefs[stage].append((member, name))
    edges = collections.defaultdict(list)
    for stage, uses in undefs.items():
        for member, name in uses:
            if name in defs and defs[name][0] != stage:
                edges[(stage, defs[name][0])].append(f"{member} -> {defs[name][1]} ({name})")
    bad = 0
    for (a, b), why in sorted(edges.items()):
        ok = b in BELOW[a]
        print(f"{a:15s} -> {b:15s} {len(why):4d} symbols  {'ok' if ok else 'FAIL: goes up or sideways'}"
              f"  e.g. {why[0]}")
        if not ok:
            bad += 1
            for w in why[:5]:
                print(f"    {w}")
    # Cycles between stages (a depth-first search over the edges).
    graph = collections.defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    state, cycles = {}, []

    def visit(n, path):
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append(path[path.index(m):] + [m])
            elif not state.get(m):
                visit(m, path + [m])
        state[n] = 2

    for n in sorted(graph):
        if not state.get(n):
            visit(n, [n])
    for c in cycles:
        print("FAIL: cycle " + " -> ".join(c))
    bad_objects = object_cycles(defs, undefs)
    if bad or cycles or bad_objects:
        return 1
    print(f"{len(edges)} edges between stages, every one downward, no cycle; no cycle between the files of a stage "
          f"but the {len(KNOWN_CYCLES)} known")
    return 0


def object_cycles(defs, undefs):
    """Prints and counts the cycles (strongly connected components) among
    one stage's objects that KNOWN_CYCLES does not list."""
    graph = collections.defaultdict(set)
    for stage, uses in undefs.items():
        for member, name in uses:
            if name in defs and defs[name][0] == stage and defs[name][1] != member:
                graph[member].add(defs[name][1])
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            strong(v)
    bad = 0
    for comp in comps:
        if comp not in KNOWN_CYCLES:
            print("FAIL: files that call each other: " + " <-> ".join(sorted(comp)))
            bad += 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
