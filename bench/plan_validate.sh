#!/usr/bin/env bash
# kiln plan's predictions against measured steps on CPU ranks
# (docs/guides/plan.md, "Validation"): examples/fashion_cnn.kl (global
# batch 64, synthetic data) and examples/gpt.kl at width 64, context 64
# (global batch 32, token files packed from docs/), on 1, 2 and 4 ranks
# of one thread each (mpirun --oversubscribe; more ranks than cores share
# them), over layouts of shard, micro-batch x accumulation and pipeline
# stages. For each world, one `kiln plan --cluster cpuxW --json` (its
# calibration times the model's steps on this CPU first); each layout
# trains STEPS steps REPEATS times. The measurement is the step an
# otherwise idle machine would take: ms/step x rank 0's CPU share over
# the run (the machine this was written on runs other jobs: a process
# got 40-50% of a core), x ranks / cores when the ranks exceed the cores;
# the fastest of the repeats. kiln plan's calibration times CPU time
# too. Writes
# OUT/results.tsv and prints the table, Spearman's rank correlation and
# the share within 25% (bench/plan_validate.py).
#
#   bench/plan_validate.sh [KILN] [OUT]     STEPS=30 REPEATS=2 MODELS="cnn gpt"
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=$(realpath "${1:-build/kiln}")
out=$(realpath -m "${2:-/tmp/kiln-plan-validate}")
steps=${STEPS:-30}
repeats=${REPEATS:-2}
models=${MODELS:-cnn gpt}
mkdir -p "$out/text"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
cores=$(nproc)

# The GPT at width 64, context 64 (4 edits of examples/gpt.kl, checked).
cp docs/*.md docs/guides/*.md "$out/text/"
"$kiln" pack --text "$out/text" -o "$out/data" > /dev/null
sed -e 's/i32\[batch, 128\]/i32[batch, 64]/' \
    -e 's/gpt(tokens, width = 128, heads = 4)/gpt(tokens, width = 64, heads = 2)/' \
    -e "s#tokens(\"data/pystd/train.tok\", val = \"data/pystd/val.tok\", context = 128, val_windows = 256)#tokens(\"$out/data/train.tok\", val = \"$out/data/val.tok\", context = 64, val_windows = 16)#" \
    examples/gpt.kl > "$out/gpt.kl"
[ "$(diff examples/gpt.kl "$out/gpt.kl" | grep -c '^>')" = 5 ] || { echo "examples/gpt.kl changed: the edits did not apply"; exit 1; }
cp examples/fashion_cnn.kl "$out/cnn.kl"
"$kiln" build "$out/cnn.kl" -o "$out/cnn"
"$kiln" build "$out/gpt.kl" -o "$out/gpt"

# Layouts: WORLD SHARD P SCHEDULE MICRO ACCUMULATE (global = MICRO x ACC x WORLD / P).
layouts_for() { # GLOBAL
  local g=$1
  echo "1 dp 1 - $g 1"
  echo "1 dp 1 - $((g / 4)) 4"
  echo "1 dp 1 - $((g / 16)) 16"
  echo "2 dp 1 - $((g / 2)) 1"
  echo "2 dp 1 - $((g / 8)) 4"
  echo "2 zero1 1 - $((g / 2)) 1"
  echo "2 zero2 1 - $((g / 4)) 2"
  echo "2 zero3 1 - $((g / 2)) 1"
  echo "2 dp 2 gpipe $((g / 4)) 4"
  echo "2 dp 2 1f1b $((g / 8)) 8"
  echo "4 dp 1 - $((g / 4)) 1"
  echo "4 zero2 1 - $((g / 4)) 1"
  echo "4 dp 2 1f1b $((g / 8)) 4"
  echo "4 dp 4 gpipe $((g / 4)) 4"
}

: > "$out/results.tsv"
for m in $models; do
  case $m in
  cnn) global=64; data=(--data synthetic:20000) ;;
  gpt) global=32; data=() ;;
  esac
  for w in 1 2 4; do
    "$kiln" plan "$out/$m.kl" --cluster "cpux$w" --global-batch "$global" --precision fp32 --json \
      > "$out/$m.plan$w.json"
  done
  layouts_for "$global" | while read -r w shard P sched micro acc; do
    args=(--steps "$steps" --eval-every 0 --threads 1 --device cpu --batch "$micro" --accumulate "$acc" --shard "$shard")
    [ "$P" -gt 1 ] && args+=(--set pipeline_parallel="$P" --set pipeline_schedule="$sched")
    best= bestwall= bestcpu=
    for r in $(seq "$repeats"); do
      if [ "$w" = 1 ]; then
        log=$("$out/$m" "${data[@]}" "${args[@]}" < /dev/null 2>&1 || true)
      else
        log=$("${mpi[@]}" -np "$w" "$out/$m" "${data[@]}" "${args[@]}" < /dev/null 2>&1 || true)
      fi
      ms=$(grep '^done:' <<< "$log" | sed -n 's/.*(\([0-9.]*\) ms\/step.*/\1/p')
      cpu=$(grep '^host:' <<< "$log" | sed -n 's/^host: CPU \([0-9.]*\)% of one core.*/\1/p')
      [ -n "$ms" ] && [ -n "$cpu" ] || { echo "FAIL: $m $w $shard P$P $micro x $acc did not train"; echo "$log" | tail -5; exit 1; }
      # The step on an otherwise idle machine: rank 0's CPU time a step
      # (its share of a core over the run), times ranks per core past
      # the cores.
      norm=$(awk -v ms="$ms" -v c="$cpu" -v w="$w" -v n="$cores" 'BEGIN { f = w > n ? w / n : 1; printf "%.3f", ms * c / 100 * f }')
      if [ -z "$best" ] || awk "BEGIN{exit !($norm < $best)}"; then best=$norm bestwall=$ms bestcpu=$cpu; fi
    done
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$w" "$shard" "$P" "$sched" "$micro" "$acc" "$best" \
      "$bestwall" "$bestcpu" >> "$out/results.tsv"
    echo "$m world $w $shard P$P $sched $micro x $acc: $best ms/step on an idle machine ($bestwall wall, CPU $bestcpu%)"
  done
done
python3 bench/plan_validate.py "$out"
