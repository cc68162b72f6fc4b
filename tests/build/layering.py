#!/usr/bin/env python3
"""The folder graph of Kiln's per-stage archives, from their symbols.

usage: layering.py BUILD_DIR [TOOLS_OBJECT ...]

For every undefined symbol of an object in libkiln_<stage>.a (and the
kiln command's objects, stage "tools"), the stage whose archive defines it
gives an edge stage -> definer. Each edge must go down the stage order of
the README (base <- ir <- {frontend, passes} <- codegen <- plan <- runtime
<- driver <- tools); an edge that goes up, or sideways between frontend
and passes, is a failure, and so is any cycle between stages."""
import collections
import os
import subprocess
import sys

BELOW = {
    "base": set(),
    "ir": {"base"},
    "frontend": {"ir", "base"},
    "passes": {"ir", "base"},
    "codegen": {"ir", "base"},
    "plan": {"codegen", "ir", "base"},
    "runtime": {"plan", "codegen", "ir", "base"},
    "driver": {"runtime", "plan", "codegen", "passes", "frontend", "ir", "base"},
    "tools": {"driver", "runtime", "plan", "codegen", "passes", "frontend", "ir", "base"},
}


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
        print(f"{a:9s} -> {b:9s} {len(why):4d} symbols  {'ok' if ok else 'FAIL: goes up or sideways'}"
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
    if bad or cycles:
        return 1
    print(f"{len(edges)} edges between stages, every one downward, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
