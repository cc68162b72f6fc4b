#!/usr/bin/env python3
"""No file of the runtime both uses and is used by the session.

usage: layering_session.py BUILD_DIR

The object graph of every per-stage archive (build/libkiln_*.a, their
members named by file): object A -> object B when A uses a symbol B
defines. The session (session.c) runs plans; the files beside it that
it calls (the slices of tensor-parallel and ZeRO-3 params, tp.c and
zero3.c) must not call back into it, and the host values every side
shares (kl_load_as, kl_store_as, kl_init_values: values.c) live apart
from it, so the data side, checkpoints and the slices reach them
without the session; the data side's files reach neither the session
nor a backend. Fails naming the circle, the file that defines those
symbols, or what the data side reaches."""
import collections
import glob
import os
import subprocess
import sys

SHARED = ("kl_load_as", "kl_store_as", "kl_init_values", "kl_convert_values")
# The data side: loading, decoding and batching samples; it reaches no
# session and no backend.
DATA = ("loader.c.o", "data.c.o", "wds_data.c.o", "token_data.c.o", "decode.c.o", "wds_tar.c.o", "tokens.c.o")


def main():
    archives = sorted(glob.glob(os.path.join(sys.argv[1], "libkiln_*.a")))
    if not archives:
        print(f"FAIL: no libkiln_*.a in {sys.argv[1]}")
        return 1
    defs, uses = {}, collections.defaultdict(set)
    for a in archives:
        out = subprocess.run(["nm", "-A", "-g", a], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            _, member, rest = line.split(":", 2)
            parts = rest.split()
            if len(parts) == 2 and parts[0] == "U":
                uses[member].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBRVWCGS":
                defs.setdefault(parts[2], member)
    graph = collections.defaultdict(set)
    for member, names in uses.items():
        for n in names:
            if n in defs and defs[n] != member:
                graph[member].add(defs[n])
    fail = 0
    session = "session.c.o"
    if session not in graph:
        print(f"FAIL: no {session} among the archives' members")
        return 1
    # Every object the session reaches that reaches it back.
    def reaches(a, b):
        seen, todo = set(), [a]
        while todo:
            n = todo.pop()
            if n == b:
                return True
            if n not in seen:
                seen.add(n)
                todo.extend(graph[n])
        return False
    for m in sorted(graph[session]):
        if reaches(m, session):
            print(f"FAIL: circle {session} -> {m} -> ... -> {session}")
            fail = 1
    for n in SHARED:
        where = defs.get(n)
        if where is None:
            print(f"FAIL: nothing defines {n}")
            fail = 1
        elif where == session:
            print(f"FAIL: {n} is defined in {session}: the data side would need the session for it")
            fail = 1
        else:
            print(f"ok: {n} in {where}")
    for m in DATA:
        if m not in uses:
            print(f"FAIL: no {m} among the archives' members")
            fail = 1
            continue
        seen, todo = set(), [m]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(graph[n])
        bad = sorted(n for n in seen if n == session or n.startswith("backend_"))
        if bad:
            print(f"FAIL: the data side's {m} reaches {', '.join(bad)}")
            fail = 1
    if not fail:
        print(f"ok: the data side ({len(DATA)} files) reaches no session and no backend")
        print(f"ok: {session} reaches {len(graph[session])} objects, none of which reaches it back")
    return fail


if __name__ == "__main__":
    sys.exit(main())
