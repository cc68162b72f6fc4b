#!/usr/bin/env bash
# shard = zero3 (README, "Many ranks"): params, gradients and optimizer
# state partitioned across the ranks, the params all-gathered per bucket
# where forward and backward read them, against one rank with the same
# global batch.
#
#   zero3.sh KILN CASE   CASE: mlp | cnn | precision | resume | plan | runtime
#
# mlp, cnn, precision and resume: tests/ranks/zero/stage_cases.bash (shared with
# zero2.sh; every rank starts from its slice of the params one rank
# draws, and the checkpoint gathers the slices into one rank's file);
# plan and runtime here.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
source "$testdir/ranks/helpers.bash"

z=zero3 z_what="params, gradients and optimizer state partitioned" cnn_ranks="2 3 4"
source "$here/ranks/zero/stage_cases.bash"

# The memory plan's gathers (tests/ranks/zero/zero3_plan.py) for kiln ir FLAGS.
plan_ok() {
  "$kiln" ir "$@" --after schedule > "$tmp/s.kir"
  "$kiln" ir "$@" --after memplan --format steps > "$tmp/steps.txt"
  "$kiln" ir "$@" --after memplan --format timeline > "$tmp/timeline.txt"
  python3 "$here/ranks/zero/zero3_plan.py" "$tmp/s.kir" "$tmp/steps.txt" "$tmp/timeline.txt"
}

case $case_ in
mlp | cnn | precision | resume)
  zero_stage_case "$case_" ;;
plan)
  # The gathers in the plans of both examples, one bucket per param and
  # the default bucket, fp32 and bf16: before their readers and just
  # before them in forward, again in backward one bucket ahead, each
  # buffer freed in the phase that gathered it.
  for m in mlp fashion_cnn; do
    for b in 0 25MiB; do
      for p in fp32 bf16; do
        echo "$m, bucket $b, $p:"
        plan_ok "examples/$m.kl" --ranks 4 --set shard=zero3 --set bucket=$b --set precision=$p
      done
    done
  done
  # The checker's controls: the first gather moved after its reader (to
  # the end of forward), and a forward gather's buffer kept into backward.
  awk '/= all_gather\(/ && !moved { held = $0; moved = 1; next } /^  backward / && held { print held; held = "" } { print }' \
    "$tmp/s.kir" > "$tmp/late.kir"
  if python3 "$here/ranks/zero/zero3_plan.py" "$tmp/late.kir" "$tmp/steps.txt" "$tmp/timeline.txt" > "$tmp/ctl.txt"; then
    echo "FAIL: a gather after its reader passes the check"; exit 1
  fi
  grep -q "before its gather" "$tmp/ctl.txt" || { cat "$tmp/ctl.txt"; exit 1; }
  sed -E 's/^( +[0-9]+ +[0-9]+ +[0-9]+)\.\.[0-9]+( .*%zero3\.[0-9]+\.gathered)$/\1..998\2/' "$tmp/timeline.txt" > "$tmp/late.txt"
  if python3 "$here/ranks/zero/zero3_plan.py" "$tmp/s.kir" "$tmp/steps.txt" "$tmp/late.txt" > "$tmp/ctl.txt"; then
    echo "FAIL: a forward gather freed in backward passes the check"; exit 1
  fi
  grep -q "not freed after forward" "$tmp/ctl.txt" || { cat "$tmp/ctl.txt"; exit 1; }
  echo "ok: the checker refuses a gather after its reader and a forward gather freed late"
  # kiln ir --after shard shows them; no param is left in the graph.
  "$kiln" ir examples/mlp.kl --after shard --ranks 3 --set shard=zero3 > "$tmp/shard.kir"
  [ "$(grep -c '= all_gather(%zero3\.0\.master)' "$tmp/shard.kir")" -eq 2 ] ||
    { echo "FAIL: kiln ir --after shard does not show a forward and a backward all_gather"; exit 1; }
  ! grep -q '^  param ' "$tmp/shard.kir" || { echo "FAIL: a param is left whole in the graph"; exit 1; }
  # Memory per rank at N = 4 (Psi = 235146, padded to 4 x 58787): every
  # fp32 param slice, gradient slice and Adam's m and v in quarters,
  # against (4 + 4 + 8) Psi / N with Kiln's bytes (and ZeRO's (2 + 2 +
  # K) Psi / N printed beside it), within 5%, fp32 and bf16 (whose 16-bit
  # slices add 2 bytes a param).
  "$kiln" ir examples/mlp.kl --after memplan --ranks 4 --set shard=zero3 > "$tmp/mem.kir"
  line=$(grep "^# memory per rank" "$tmp/mem.kir")
  echo "$line"
  [[ $line == "# memory per rank (4 ranks, shard zero3, params, gradients and optimizer state partitioned): param slices (fp32 masters) 0.24 MB, gradients 0.24 MB, optimizer state 0.47 MB, total 0.94 MB; zero3 formula with Kiln's bytes (4 + 4 + 8) Psi / N = 0.94 MB (measured / formula "* ]] ||
    { echo "FAIL: zero3's memory per rank is not the known figures"; exit 1; }
  [[ $line == *"zero3 0.94 MB" ]] || { echo "FAIL: ZeRO's own zero3 formula is not printed beside"; exit 1; }
  for p in fp32 bf16; do
    ratio=$("$kiln" ir examples/mlp.kl --after memplan --ranks 4 --set shard=zero3 --set precision=$p |
      sed -n 's/^# memory per rank.*(measured \/ formula \([0-9.]*\)).*/\1/p')
    awk -v r="$ratio" 'BEGIN { exit !(r >= 0.95 && r <= 1.05) }' ||
      { echo "FAIL: zero3 $p: measured / formula '$ratio' is not within 5%"; exit 1; }
    echo "ok: zero3 $p at N = 4: measured / formula $ratio"
  done
  ;;
runtime)
  # Two buckets (bucket = 140000: the backward prefetch has a bucket to
  # run ahead of) with the collectives in program order (overlap off; the
  # other cases run them on the communication thread, the default).
  build mlp
  one ref "$tmp/mlp" --batch 48
  ranks 3 off "$tmp/mlp" --batch 16 --bucket 140000 --overlap off
  same ref off
  # Evaluation reads the params whole: each evaluation fills its copies
  # from the gathered slices, so its losses are one rank's.
  "$tmp/mlp" "${loud[@]}" --batch 48 --eval-every 10 > "$tmp/eval1.txt"
  "${mpi[@]}" -np 3 "$tmp/mlp" "${loud[@]}" --batch 16 --eval-every 10 --shard zero3 > "$tmp/eval3.txt"
  evals() { sed -n 's/^\(epoch .* eval .*samples)\).*/\1/p' "$1"; }
  diff <(evals "$tmp/eval1.txt") <(evals "$tmp/eval3.txt") ||
    { echo "FAIL: zero3's evaluations differ from one rank's"; exit 1; }
  [ "$(evals "$tmp/eval3.txt" | wc -l)" -ge 2 ] || { echo "FAIL: no evaluation to compare"; exit 1; }
  # --export writes the params whole and --init fills the slices: one
  # rank's export and 3 zero3 ranks' start the same 5-step runs, on one
  # rank and on 3 zero3 ranks (the control: a run from the init differs).
  one e1 "$tmp/mlp" --batch 48 --steps 10 --export "$tmp/e1.safetensors"
  ranks 3 e3 "$tmp/mlp" --batch 16 --steps 10 --export "$tmp/e3.safetensors"
  one i1 "$tmp/mlp" --batch 48 --steps 5 --init "$tmp/e1.safetensors"
  one i3 "$tmp/mlp" --batch 48 --steps 5 --init "$tmp/e3.safetensors"
  same i1 i3
  ranks 3 z3i1 "$tmp/mlp" --batch 16 --steps 5 --init "$tmp/e1.safetensors"
  same i1 z3i1
  one fresh "$tmp/mlp" --batch 48 --steps 5
  differ i1 fresh
  # One rank: zero3 is a no-op there (dp).
  "$tmp/mlp" "${common[@]}" --batch 48 --shard zero3 --metrics "$tmp/one.json" > /dev/null
  compare losses "$tmp/ref.json" "$tmp/one.json" 1e-5 || { echo "FAIL: zero3 on one rank is not dp"; exit 1; }
  # Tensor parallelism with zero3 is refused, with the reason.
  if "$kiln" ir tests/ranks/tp_mlp.kl --after shard --ranks 4 --set shard=zero3 --set tensor_parallel=2 > /dev/null 2> "$tmp/err.txt"; then
    echo "FAIL: zero3 with tensor_parallel = 2 was accepted"; exit 1
  fi
  grep -qE "(shard = zero3 with tensor_parallel = 2|tensor_parallel = 2 with (a ZeRO shard mode|shard = zero3)) is not built" "$tmp/err.txt" || { echo "FAIL: no clear error"; cat "$tmp/err.txt"; exit 1; }
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "zero3.$case_: ok"
