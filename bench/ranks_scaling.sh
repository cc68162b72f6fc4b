#!/usr/bin/env bash
# Weak scaling across ranks on the CPU, with the collectives overlapped
# with backward and not (README, "Many ranks", overlap): both examples,
# N = 1, 2, 4 ranks of one thread each, the same batch per rank.
#
#   bench/ranks_scaling.sh [N...]          (default 1 2 4)
#   KILN=path/to/kiln                      (default ./build/kiln)
#   STEPS=20 BUCKET=64KiB                  (steps per run; --bucket)
#
# Per example, N and overlap (on, off; N = 1 has no collectives): the
# median step time over the steps after the first 5 (the train records of
# --log-every 1), the weak-scaling efficiency (the 1-rank median over the
# N-rank median: 1.00 is perfect, the global batch grows with N), and
# rank 0's collectives per step (medians over the same steps of the
# records' collective_ms and collective_exposed_ms): their time on the
# communication thread (or inline), the part of it the executor spent
# waiting for them (exposed), and the part hidden behind compute (1 -
# exposed / time, of the medians). One run per row. BUCKET is 64 KiB so that the examples' gradients (0.9 MB
# mlp) make several buckets, the first of which can run while backward
# computes the rest; with the default 25 MiB each example is one bucket,
# posted after the last gradient, and nothing can hide.
set -euo pipefail
kiln=${KILN:-./build/kiln}
steps=${STEPS:-20}
bucket=${BUCKET:-64KiB}
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(1 2 4)
command -v mpirun > /dev/null || { echo "no mpirun (scripts/setup.sh installs openmpi-bin)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cores=$(getconf _NPROCESSORS_ONLN)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# run EXE NP OVERLAP BATCH: prints "median_ms coll_ms exposed_ms calls".
run() {
  local exe=$1 np=$2 overlap=$3 batch=$4 launch=()
  [ "$np" -gt 1 ] && launch=(timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$np")
  "${launch[@]}" "$exe" --data synthetic:4096 --batch "$batch" --steps "$steps" --eval-every 0 --log-every 1 \
    --threads 1 --quiet --bucket "$bucket" --overlap "$overlap" --metrics "$tmp/m.json" > /dev/null
  python3 - "$tmp/m.json" <<'PY'
import json, statistics, sys
rs = [r for r in (json.loads(l) for l in open(sys.argv[1])) if r["type"] == "train" and r["step"] > 5]
s = [r for r in (json.loads(l) for l in open(sys.argv[1])) if r["type"] == "summary"][0]
med = lambda k: statistics.median(r.get(k, 0) for r in rs)
print(f'{med("ms_per_step"):.2f} {med("collective_ms"):.2f} {med("collective_exposed_ms"):.2f} '
      f'{s.get("collective_calls_per_step", 0):.0f}')
PY
}

echo "$cores cores; $steps steps per run, median step time over steps 6..$steps; bucket $bucket; 1 thread per rank"
printf "%-12s %2s %-7s %6s %9s %6s %8s %8s %8s %7s\n" example N overlap batch "ms/step" eff "coll ms" "exposed" "hidden" "calls"
for ex in mlp:64 fashion_cnn:16; do
  name=${ex%%:*} batch=${ex##*:}
  "$kiln" build "examples/$name.kl" -o "$tmp/$name" > /dev/null
  base=
  for np in "${nps[@]}"; do
    modes=(on off)
    [ "$np" -eq 1 ] && modes=(-)
    for mode in "${modes[@]}"; do
      read -r med coll exposed calls <<< "$(run "$tmp/$name" "$np" "${mode/-/on}" "$batch")"
      [ "$np" -eq 1 ] && base=$med
      eff=$([ -n "$base" ] && python3 -c "print(f'{$base / $med:.2f}')" || echo "-")
      hidden=$(python3 -c "c, w = $coll, $exposed; print(f'{100 * (c - w) / c:.0f}%' if c > 0 else '-')")
      printf "%-12s %2d %-7s %6d %9.2f %6s %8.2f %8.2f %8s %7s\n" "$name" "$np" "$mode" "$batch" "$med" "$eff" "$coll" "$exposed" "$hidden" "$calls"
    done
  done
done
