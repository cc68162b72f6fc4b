#!/usr/bin/env bash
# --profile's bottleneck summary on 2 ranks with overlap on (runtime/
# bottleneck.c): the collectives row is the time the step waited for
# collectives (the summary's "exposed" figure), the part hidden behind
# backward is reported apart and counted in no row; with overlap off the
# row is the whole collective time.
#   profile.sh KILN
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
source "$testdir/ranks/helpers.bash"
build mlp
run() { "${mpi[@]}" -np 2 "$tmp/mlp" --data synthetic:600 --batch 8 --bucket 64KiB --steps 8 --eval-every 0 --quiet \
          --profile --overlap "$1" > "$tmp/$1.txt"; }
run on
run off
python3 - "$tmp/on.txt" "$tmp/off.txt" <<'PY'
import re, sys
for path, overlap in ((sys.argv[1], "on"), (sys.argv[2], "off")):
    text = open(path).read()
    m = re.search(r"^collectives: ([0-9.]+) ms/step in .* ([0-9.]+) ms/step exposed .* ([0-9.]+) ms/step \(\d+%\) hidden", text, re.M)
    row = re.search(r"^  collectives +([0-9.]+) ms", text, re.M)
    step = re.search(r"^where the step's time goes \(([0-9.]+) ms a step", text, re.M)
    if not (m and row and step):
        sys.exit(f"FAIL: overlap {overlap}: no collectives summary, row or step time:\n{text}")
    comm, exposed, hidden, r = float(m.group(1)), float(m.group(2)), float(m.group(3)), float(row.group(1))
    note = re.search(r"^  \(collectives hidden behind compute: ([0-9.]+) ms a step", text, re.M)
    noted = float(note.group(1)) if note else 0.0
    # Rounding (0.001 ms), and the row's per-step clock around the call,
    # a little wider than the collective's own (1%).
    if abs(r - exposed) > 0.003 + 0.01 * exposed:
        sys.exit(f"FAIL: overlap {overlap}: the collectives row is {r} ms a step, the exposed time {exposed} ms (all {comm} ms)")
    if abs(noted - hidden) > 0.003:
        sys.exit(f"FAIL: overlap {overlap}: the hidden note says {noted} ms, the summary {hidden} ms")
    rows = [float(x) for x in re.findall(r"^  [a-zA-Z/ ]+? +([0-9.]+) ms +[0-9.]+%", text, re.M)]
    host = rows[-1]
    if host > 0 and abs(sum(rows) - float(step.group(1))) > 0.01:
        sys.exit(f"FAIL: overlap {overlap}: rows add up to {sum(rows)} ms, the step is {step.group(1)} ms")
    if overlap == "off" and hidden > 0.003:
        sys.exit(f"FAIL: overlap off hides {hidden} ms")
    print(f"ok: overlap {overlap}: collectives row {r} ms = exposed {exposed} ms of {comm} ms; hidden {noted} ms apart")
PY
