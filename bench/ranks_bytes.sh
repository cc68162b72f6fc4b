#!/usr/bin/env bash
# Bytes each rank sends per training step, measured, against ZeRO's
# formula (README, "Many ranks"). Data parallel all-reduces every
# gradient once a step; a ring all-reduce (a reduce-scatter, then an
# all-gather) makes each rank send 2 (N - 1) / N x the gradients' bytes,
# ZeRO's "2 Psi" (Psi elements of 4 bytes here: fp32 gradients) for large N.
#
#   bench/ranks_bytes.sh [MODEL] [N...]     (default examples/mlp.kl, 2 3 4)
#   KILN=path/to/kiln bench/ranks_bytes.sh  (default ./build/kiln)
#   SHARD=zero1 bench/ranks_bytes.sh        (--shard; default dp)
#   PRECISION=bf16 bench/ranks_bytes.sh     (--precision; default fp32)
#
# zero1 and zero2 send the same 2 (N - 1) / N x the gradients' bytes (plus
# the padding to N slices): a reduce-scatter of the gradients (zero2: per
# bucket, in backward), then an all-gather of the updated fp32 master
# slices (under bf16/fp16 the same one all-gather fills the params' 16-bit
# copies too).
#
# zero3 sends 3 (N - 1) / N x Psi elements, ZeRO's "3 Psi": the
# reduce-scatter of the fp32 gradients and two all-gathers of the params'
# slices a step (forward, then backward again); under bf16/fp16 the
# gathers carry the 16-bit slices (2 bytes an element, the
# reduce-scatter 4).
#
# Measured by Open MPI's monitoring component (pml_monitoring: every
# point-to-point message a rank sends, collectives' included, per peer),
# over S = 10 steps: (bytes of an 11-step run - bytes of a 1-step run) / 10,
# so start-up traffic cancels. Each N runs twice: with Open MPI's default
# choice of all-reduce algorithm (it picks by size and N; some are not
# symmetric across ranks) and with the ring forced
# (coll_tuned_allreduce_algorithm 4). Prints per N and algorithm the
# least and most bytes a rank sent per step, the formula's bytes, and
# most / formula. The loss and metric sums (a few f64 a step) are in the
# measurement, not in the formula. One thread per rank, --batch 8.
set -euo pipefail
kiln=${KILN:-./build/kiln}
shard=${SHARD:-dp}
precision=${PRECISION:-fp32}
model=${1:-examples/mlp.kl}
shift || true
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(2 3 4)
command -v mpirun > /dev/null || { echo "no mpirun (scripts/setup.sh installs openmpi-bin)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kiln" build "$model" -o "$tmp/exe" > /dev/null
psi=$("$kiln" ir "$model" --after memplan --ranks 2 | sed -n 's/.*Psi = \([0-9]*\) params.*/\1/p' | head -1)
[ -n "$psi" ] || { echo "kiln ir printed no Psi for $model"; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# sent NP STEPS ALG: one line, the bytes each rank sent (rank order).
sent() {
  local np=$1 steps=$2 alg=$3 extra=()
  [ "$alg" = ring ] && extra=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4)
  rm -f "$tmp"/prof.*
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$np" --mca pml_monitoring_enable 2 \
    --mca pml_monitoring_enable_output 3 --mca pml_monitoring_filename "$tmp/prof" "${extra[@]}" \
    "$tmp/exe" --data synthetic:600 --batch 8 --steps "$steps" --eval-every 0 --threads 1 --quiet --shard "$shard" \
    --precision "$precision" > /dev/null
  for ((r = 0; r < np; r++)); do
    awk '$1 == "I" || $1 == "E" { b += $4 } END { printf "%d ", b }' "$tmp/prof.$r.prof"
  done
  echo
}

echo "model $model, Psi = $psi params (fp32 gradients: $((4 * psi)) bytes), shard $shard, precision $precision"
printf "%-4s %-8s %14s %14s %14s %8s\n" N algorithm "least/rank" "most/rank" "formula" "most/f"
for np in "${nps[@]}"; do
  for alg in default ring; do
    read -r -a one <<< "$(sent "$np" 1 "$alg")"
    read -r -a eleven <<< "$(sent "$np" 11 "$alg")"
    least=-1 most=0
    for ((r = 0; r < np; r++)); do
      per=$(((eleven[r] - one[r]) / 10))
      ((least < 0 || per < least)) && least=$per
      ((per > most)) && most=$per
    done
    formula=$((2 * (np - 1) * 4 * psi / np))
    if [ "$shard" = zero3 ]; then
      gather_bytes=4
      [ "$precision" = fp32 ] || gather_bytes=2
      formula=$(((np - 1) * (4 + 2 * gather_bytes) * psi / np))
    fi
    printf "%-4s %-8s %14d %14d %14d %8s\n" "$np" "$alg" "$least" "$most" "$formula" \
      "$(awk -v a="$most" -v b="$formula" 'BEGIN { printf "%.4f", a / b }')"
  done
done
