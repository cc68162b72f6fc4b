#!/usr/bin/env bash
# The model summary (kiln ir --summary, and at a run's start with the
# progress bar): its totals are the plan's own numbers, for both
# examples and the GPT (tests/gpt/tiny.sh's size): the params equal the
# elements of a checkpoint's "param" values (kiln ckpt), the GEMM FLOPs
# per optimizer step (and the rows' FLOPs per sample x batch) equal kiln
# counters' gemm_flops, the arena and persistent bytes equal the memory
# plan's (kiln counters' arena_bytes and persistent_bytes); with --ranks
# the per-rank params are zero3's slices. One thread (tests/lib.sh).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../gpt/tiny.sh"
kiln=$1
new_tmpdir
tiny_gpt "$kiln" "$tmp" || exit 1
for m in examples/mlp.kl examples/fashion_cnn.kl "$tmp/m/gpt.kl"; do
  name=$(basename "$m" .kl)
  "$kiln" ir "$m" --summary > "$tmp/$name.sum" || { bad "$name: kiln ir --summary"; continue; }
  "$kiln" counters "$m" --json > "$tmp/$name.json" || { bad "$name: kiln counters"; continue; }
  "$kiln" build "$m" -o "$tmp/$name" > /dev/null 2>&1 || { bad "$name: kiln build"; continue; }
  data=(--data synthetic:256)
  [ "$name" = gpt ] && data=()
  "$tmp/$name" "${data[@]}" --steps 1 --eval-every 0 --quiet --save-init "$tmp/$name.ckpt" > /dev/null ||
    { bad "$name: --save-init"; continue; }
  "$kiln" ckpt "$tmp/$name.ckpt" > "$tmp/$name.ck" || { bad "$name: kiln ckpt"; continue; }
  python3 - "$tmp/$name" "$name" <<'PY' || fail=1
import json, re, sys
base, name = sys.argv[1], sys.argv[2]
text = open(base + ".sum").read()
counters = {k[len("train."):]: v for k, v in json.load(open(base + ".json"))["counters"].items() if k.startswith("train.")}
ck = open(base + ".ck").read()
batch = int(re.search(r"batch (\d+)", text).group(1))
rows = [l.split() for l in text.splitlines()[2:] if l.startswith("  ") and not l.startswith("  per ") and not l.startswith("  memory")]
total = [r for r in rows if r[0] == "total"][0]
body = [r for r in rows if r[0] != "total"]
params, fwd, bwd, act = (int(x) for x in total[1:5])
ck_params = int(re.search(r"^  param +\d+ values +(\d+) elements", ck, re.M).group(1))
step_flops = float(re.search(r"(\d+) GEMM FLOPs", text).group(1))
arena = int(re.search(r"arena (\d+) bytes", text).group(1))
persistent = int(re.search(r"persistent (\d+) bytes", text).group(1))
checks = [
    ("params = the checkpoint's param elements", params, ck_params),
    ("rows' params add up to the total", sum(int(r[-5]) for r in body), params),
    ("GEMM FLOPs per step = kiln counters' gemm_flops", step_flops, counters["gemm_flops"]),
    ("(fwd + bwd FLOPs per sample) x batch = gemm_flops", (fwd + bwd) * batch, counters["gemm_flops"]),
    ("rows' fwd FLOPs add up", sum(float(r[-4]) for r in body), fwd),
    ("arena = the memory plan's (arena_bytes)", arena, counters["arena_bytes"]),
    ("persistent = the memory plan's (persistent_bytes)", persistent, counters["persistent_bytes"]),
    ("saved activations within the arena", min(act, arena), act),
]
bad = 0
for what, got, want in checks:
    if got == want:
        print(f"ok: {name}: {what} ({got:.0f})")
    else:
        print(f"FAIL: {name}: {what}: {got} != {want}")
        bad = 1
sys.exit(bad)
PY
done
# One row per call with the call's line: mlp's three dense calls at 18, 19, 20.
grep -qE '^  dense\.1 +18  f32\[128,256\] +200960 ' "$tmp/mlp.sum" && grep -qE '^  dense\.3 +20  f32\[128,10\] +1290 ' "$tmp/mlp.sum" &&
  ok "mlp: dense.1 at line 18 (200960 params), dense.3 at line 20" || { cat "$tmp/mlp.sum"; bad "mlp's dense rows"; }
# Nested calls: the GPT's blocks and their dense layers have rows of their own.
grep -qE '^  gpt\.1\.block\.1\.dense\.1 ' "$tmp/gpt.sum" && ok "gpt: nested calls have rows" || bad "gpt: no nested rows"
# Many ranks: zero3's slices per rank, half the params on each of 2 ranks (235146 = 2 x 117573).
"$kiln" ir examples/mlp.kl --summary --ranks 2 --set shard=zero3 > "$tmp/zero3.sum"
grep -q '^  per rank (2 ranks, shard zero3): params 117573 elements (470292 bytes)' "$tmp/zero3.sum" &&
  grep -qE '^  total +235146 ' "$tmp/zero3.sum" && ok "zero3 on 2 ranks: 117573 params per rank of 235146" ||
  { cat "$tmp/zero3.sum"; bad "zero3's per-rank params"; }
# At a run's start on a terminal (the bar), not redirected.
if command -v script > /dev/null; then
  (unset CI; script -qfec "stty cols 160; $tmp/mlp --data synthetic:256 --steps 1 --eval-every 0" /dev/null) > "$tmp/tty.txt"
  grep -qE '^  total +235146 ' "$tmp/tty.txt" && ok "the summary at start on a terminal" || bad "no summary on a terminal"
  "$tmp/mlp" --data synthetic:256 --steps 1 --eval-every 0 > "$tmp/file.txt"
  grep -q 'model summary' "$tmp/file.txt" && bad "a summary in a redirected run" || ok "no summary redirected"
fi
# Refusals name the flag.
"$kiln" ir examples/mlp.kl --summary --eval > "$tmp/err.txt" 2>&1 && bad "--summary --eval accepted"
grep -q 'kiln ir: --summary needs the training plan' "$tmp/err.txt" && ok "--summary --eval refused" || bad "--summary --eval: $(cat "$tmp/err.txt")"
exit $fail
