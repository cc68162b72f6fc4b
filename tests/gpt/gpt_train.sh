#!/usr/bin/env bash
# examples/gpt.kl, tiny (tests/gpt/tiny.sh), against the f64 reference
# evaluator (fp32 and bf16) and trained for 40 steps on token files: the
# first loss is near ln(256) (small logits) and the loss falls, in fp32
# and in bf16. One thread (tests/lib.sh).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/tiny.sh"
kiln=$1 refcheck=$2
new_tmpdir
tiny_gpt "$kiln" "$tmp" || exit 1
fail=0
"$refcheck" "$tmp/m/gpt.kl" --batch 2 || fail=1
"$refcheck" "$tmp/m/gpt.kl" --batch 2 --set precision=bf16 || fail=1
"$kiln" build "$tmp/m/gpt.kl" -o "$tmp/gpt" || exit 1
for p in fp32 bf16; do
  "$tmp/gpt" --steps 40 --batch 8 --log-every 1 --eval-every 20 --set "precision=$p" --set "schedule=warmup_cosine(warmup = 5)" \
    --metrics "$tmp/$p.json" > /dev/null || { echo "FAIL: training in $p"; fail=1; continue; }
  python3 - "$tmp/$p.json" "$p" <<'PY' || fail=1
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
tr = [r["loss"] for r in recs if r.get("type") == "train"]
ev = [r["loss"] for r in recs if r.get("type") == "eval"]
assert len(tr) == 40 and len(ev) >= 2, (tr, ev)
assert abs(tr[0] - math.log(256)) < 0.05, f"first loss {tr[0]}, expected about ln(256) = {math.log(256):.4f}"
first, last = sum(tr[:4]) / 4, sum(tr[-4:]) / 4
assert last < first - 1.0, f"the loss did not fall by 1 nat: {first:.4f} -> {last:.4f}"
assert ev[-1] < ev[0], f"the validation loss did not fall: {ev}"
print(f"ok: {sys.argv[2]}: loss {first:.4f} (first 4 steps) -> {last:.4f} (last 4); validation {ev[0]:.4f} -> {ev[-1]:.4f}")
PY
done
exit $fail
