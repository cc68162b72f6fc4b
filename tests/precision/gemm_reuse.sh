#!/usr/bin/env bash
# Widened GEMM operands kept within a step (plan/gemm_reuse.c, the CPU
# backend's KILN_GEMM_REUSE): with KILN_GEMM_REUSE=check every reuse is
# compared with the operand widened again (a difference aborts), and the
# runs must be those without keeping, byte for byte:
#  - fp16 MLP, 24 steps from a loss scale of 1e9 (the first steps skipped:
#    non-finite gradients), checkpoint at 12 and 24: reuses happen (the
#    count is printed), step 24's checkpoint equals KILN_GEMM_REUSE=off's;
#  - resumed at step 12 under check, step 24's checkpoint is the same;
#  - bf16 with --bf16-gemm openblas (widened bf16), 2 steps of the fp16
#    CNN (im2col columns, convolution gradients) and fp16 ZeRO-3 on 2
#    ranks (gathered weights) under check;
#  - another value of KILN_GEMM_REUSE is refused, naming it.
source "$(dirname "$0")/../lib.sh"
set -euo pipefail
kiln=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
data=/usr/share/datasets/fashion-mnist
run() {  # run REUSE MODEL ARGS...
  local reuse=$1 model=$2
  shift 2
  KILN_GEMM_REUSE=$reuse "$kiln" run "$model" --device cpu --threads 1 --eval-every 0 --data "$data" "$@" 2>&1
}
reused() {  # reused LOG: the count of checked reuses, or "none"
  sed -n 's/^KILN_GEMM_REUSE=check: \([0-9]*\) reused widened GEMM operands, \1 checked, all equal$/\1/p' "$1" |
    tail -1 | grep . || echo none
}
mlp=(examples/mlp.kl --precision fp16 --set 'loss_scale=dynamic(scale = 1e9)' --log-every 12)
run check "${mlp[@]}" --steps 24 --save "$tmp/check.ckpt" --save-every 12 > "$tmp/check.log"
run off "${mlp[@]}" --steps 24 --save "$tmp/off.ckpt" > "$tmp/off.log"
n=$(reused "$tmp/check.log")
skipped=$(sed -n 's/.*step *24\/24 .* skipped \([0-9]*\).*/\1/p' "$tmp/check.log" | tail -1)
if [ "$n" != none ] && [ "$n" -ge 24 ] && [ "${skipped:-0}" -gt 0 ]; then
  echo "ok: fp16 MLP under check: $n reused operands equal to their widening again, $skipped steps skipped"
else
  echo "FAIL: fp16 MLP under check: reused '$n', skipped '${skipped:-?}' (want reuses and skipped steps)" >&2
  tail -5 "$tmp/check.log" >&2
  fail=1
fi
if cmp -s "$tmp/check.ckpt" "$tmp/off.ckpt"; then
  echo "ok: step 24's checkpoint the same, byte for byte, with and without kept operands"
else
  echo "FAIL: step 24's checkpoint differs between KILN_GEMM_REUSE=check and off" >&2
  fail=1
fi
run check "${mlp[@]}" --steps 24 --resume "$tmp/check.ckpt.step-12" --save "$tmp/resumed.ckpt" > "$tmp/resumed.log"
if [ "$(reused "$tmp/resumed.log")" != none ] && cmp -s "$tmp/resumed.ckpt" "$tmp/off.ckpt"; then
  echo "ok: resumed at step 12 under check, step 24's checkpoint is the same"
else
  echo "FAIL: the run resumed at step 12 under check differs (or reused nothing)" >&2
  tail -3 "$tmp/resumed.log" >&2
  fail=1
fi
for spec in "bf16:examples/mlp.kl --precision bf16 --bf16-gemm openblas --steps 6" \
            "fp16 CNN:examples/fashion_cnn.kl --precision fp16 --steps 2 --batch 32"; do
  name=${spec%%:*}
  read -r -a args <<< "${spec#*:}"
  run check "${args[@]}" --save "$tmp/c.ckpt" > "$tmp/c.log"
  run off "${args[@]}" --save "$tmp/o.ckpt" > "$tmp/o.log"
  n=$(reused "$tmp/c.log")
  if [ "$n" != none ] && [ "$n" -gt 0 ] && cmp -s "$tmp/c.ckpt" "$tmp/o.ckpt"; then
    echo "ok: $name under check: $n reused operands, the checkpoint equal to off's"
  else
    echo "FAIL: $name under check: reused '$n', or its checkpoint differs from off's" >&2
    tail -3 "$tmp/c.log" >&2
    fail=1
  fi
done
# ZeRO-3 on 2 ranks: the weights gathered before each GEMM (a collective
# writes them) are kept only between gathers.
zrun() {  # zrun REUSE CKPT
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x KILN_GEMM_REUSE="$1" "$kiln" run examples/mlp.kl \
    --device cpu --threads 1 --eval-every 0 --data "$data" --precision fp16 --shard zero3 --steps 4 --save "$2" 2>&1
}
zrun check "$tmp/zc.ckpt" > "$tmp/zc.log"
zrun off "$tmp/zo.ckpt" > "$tmp/zo.log"
n=$(reused "$tmp/zc.log")
if [ "$n" != none ] && [ "$n" -gt 0 ] && cmp -s "$tmp/zc.ckpt" "$tmp/zo.ckpt"; then
  echo "ok: fp16 zero3 on 2 ranks under check: $n reused operands a rank, the checkpoint equal to off's"
else
  echo "FAIL: fp16 zero3 on 2 ranks under check: reused '$n', or its checkpoint differs from off's" >&2
  tail -3 "$tmp/zc.log" >&2
  fail=1
fi
if out=$(KILN_GEMM_REUSE=maybe "$kiln" run examples/mlp.kl --device cpu --steps 1 --data "$data" 2>&1); then
  echo "FAIL: KILN_GEMM_REUSE=maybe was accepted" >&2
  fail=1
elif grep -q "KILN_GEMM_REUSE must be on, off or check, got 'maybe'" <<< "$out"; then
  echo "ok: KILN_GEMM_REUSE=maybe refused, naming the variable"
else
  echo "FAIL: KILN_GEMM_REUSE=maybe: unclear error: $out" >&2
  fail=1
fi
exit $fail
