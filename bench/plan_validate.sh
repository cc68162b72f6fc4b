#!/usr/bin/env bash
# kiln plan's predictions against measured steps on CPU ranks
# (docs/guides/plan.md, "Validation"): examples/fashion_cnn.kl (global
# batch 64, synthetic data) and examples/gpt.kl at width 64, context 64
# (global batch 32, token files packed from docs/), on 1, 2 and 4 ranks
# of one thread each (mpirun --oversubscribe: 4 ranks on a 2-core machine
# share the cores, and the prediction says so), over layouts of shard,
# micro-batch x accumulation and pipeline stages.
#
# The measurement is the wall time of a step (the executable's timed
# ms/step, warm-up steps left out). The machine this runs on is shared,
# so every process here runs at a raised priority (nice NICE, default
# -15 where allowed, on the processes and on this script's session's
# autogroup, which the kernel weighs against the other sessions': the
# other jobs then take about a tenth of the cores from it instead of
# most), the layouts are run in ROUNDS
# rounds, each round every layout once in turn (so a change of load hits
# all layouts alike), and each layout's figure is the median of its
# rounds. The load average and each run's CPU share (rank 0's CPU time
# over its wall time) are recorded beside it. For each world, one `kiln
# plan --cluster cpuxW --json` (its calibration times the model's steps
# on this CPU first, at the same priority). MPI as the tests run it:
# shared memory, ranks that wait yield their core (tests/lib.sh).
# Writes OUT/results.tsv, OUT/load.txt and prints the table, Spearman's
# rank correlation and the share within 25% (bench/plan_validate.py).
#
#   bench/plan_validate.sh [KILN] [OUT]     STEPS=30 ROUNDS=5 MODELS="cnn gpt" WORLDS="1 2 4" NICE=-15
set -euo pipefail
# A session of its own: the kernel's autogroup scheduling shares the cores
# between sessions first, so a nice value counts only against this
# session's other processes; the session's own autogroup nice is what
# raises it against the others' (set below, gone with the session).
if [ -z "${PLAN_VALIDATE_SESSION:-}" ] && command -v setsid > /dev/null; then
  PLAN_VALIDATE_SESSION=1 exec setsid -w bash "$0" "$@"
fi
cd "$(dirname "$0")/.."
kiln=$(realpath "${1:-build/kiln}")
out=$(realpath -m "${2:-/tmp/kiln-plan-validate}")
steps=${STEPS:-30}
rounds=${ROUNDS:-5}
models=${MODELS:-cnn gpt}
worlds=${WORLDS:-1 2 4}
mkdir -p "$out/text" "$out/logs"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
nice_level=${NICE:--15}
if nice -n "$nice_level" true 2> /dev/null && [ "$(nice -n "$nice_level" nice)" = "$nice_level" ]; then
  pri=(nice -n "$nice_level")
else
  echo "note: nice -n $nice_level is not allowed here: measuring at the default priority"
  pri=()
  nice_level=0
fi
group="autogroup nice unchanged"
if [ "$nice_level" != 0 ] && [ -w /proc/self/autogroup ] && echo "$nice_level" > /proc/self/autogroup 2> /dev/null; then
  group="autogroup nice $nice_level ($(cat /proc/self/autogroup))"
fi
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
cores=$(nproc --all)

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
  echo "4 zero1 2 1f1b $((g / 8)) 4"
  echo "4 zero3 2 1f1b $((g / 8)) 4"
  echo "4 dp 4 gpipe $((g / 4)) 4"
}

global_of() { case $1 in cnn) echo 64 ;; gpt) echo 32 ;; esac; }
data_of() { case $1 in cnn) echo "--data synthetic:20000" ;; gpt) echo "" ;; esac; }

: > "$out/runs.tsv"
{ echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) cores $cores nice $nice_level, $group"; } > "$out/load.txt"
for m in $models; do
  for w in $worlds; do
    "${pri[@]}" "$kiln" plan "$out/$m.kl" --cluster "cpux$w" --global-batch "$(global_of "$m")" --precision fp32 --json \
      > "$out/$m.plan$w.json"
  done
done
echo "plans $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"

for r in $(seq "$rounds"); do
  for m in $models; do
    layouts_for "$(global_of "$m")" | while read -r w shard P sched micro acc; do
      case " $worlds " in *" $w "*) ;; *) continue ;; esac
      read -r -a data <<< "$(data_of "$m")"
      tag="$m.w$w.$shard.P$P.$sched.${micro}x$acc"
      args=(--steps "$steps" --eval-every 0 --threads 1 --device cpu --batch "$micro" --accumulate "$acc" --shard "$shard"
            --metrics "$out/logs/$tag.r$r.jsonl")
      [ "$P" -gt 1 ] && args+=(--set pipeline_parallel="$P" --set pipeline_schedule="$sched")
      load=$(cut -d' ' -f1 /proc/loadavg)
      if [ "$w" = 1 ]; then
        log=$("${pri[@]}" "$out/$m" "${data[@]}" "${args[@]}" < /dev/null 2>&1 || true)
      else
        log=$("${pri[@]}" "${mpi[@]}" -np "$w" "$out/$m" "${data[@]}" "${args[@]}" < /dev/null 2>&1 || true)
      fi
      echo "$log" > "$out/logs/$tag.r$r.log"
      ms=$(grep '"type": "summary"' "$out/logs/$tag.r$r.jsonl" 2> /dev/null | sed -n 's/.*"timed_ms_per_step": \([0-9.]*\).*/\1/p' | tail -1 || true)
      cpu=$(grep '^host:' <<< "$log" | sed -n 's/^host: CPU \([0-9.]*\)% of one core.*/\1/p' || true)
      coll=$(grep '^collectives:' <<< "$log" | sed -n 's/^collectives: \([0-9.]*\) ms\/step in [0-9]* calls\/step (rank 0), \([0-9.]*\) ms\/step exposed.*/\1 \2/p' || true)
      [ -n "$ms" ] && [ -n "$cpu" ] || { echo "FAIL: $tag did not train"; echo "$log" | tail -5; exit 1; }
      read -r cms cexp <<< "${coll:-0 0}"
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$w" "$shard" "$P" "$sched" "$micro" "$acc" "$r" \
        "$ms" "$cpu" "$load" "$cms" "$cexp" >> "$out/runs.tsv"
      echo "round $r: $m world $w $shard P$P $sched $micro x $acc: $ms ms/step (CPU $cpu%, load $load; collectives $cms ms, $cexp exposed)"
    done
  done
  echo "round $r $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
done
cat "$out/load.txt"
python3 bench/plan_validate.py "$out"
