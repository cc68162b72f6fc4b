#!/usr/bin/env bash
# Two builds' fp32/bf16/fp16 step times in one run: bench/precision.sh's
# variants (fp32, bf16, bf16-openblas, fp16) for the executables OLD and
# NEW (from `kiln build MODEL.kl -o FILE` of each build), alternated
# run by run (old, new, old, ...), median timed_ms_per_step of each and
# its ratio to the same build's fp32, and new/old per variant.
#
#   bench/precision_ab.sh OLD NEW [STEPS] [REPEATS]     (defaults: 20 5)
#
# One thread; OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for the timed
# runs only, as in bench/precision.sh; the fashion-mnist data set.
set -euo pipefail
old=$1 new=$2 steps=${3:-20} repeats=${4:-5}
data=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clean_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
variants=(fp32 bf16 bf16-openblas fp16)
flags() {
  case $1 in
    bf16-openblas) echo "--precision bf16 --bf16-gemm openblas" ;;
    *) echo "--precision $1" ;;
  esac
}
for b in old new; do  # compile each plan's kernels once, untimed
  for p in "${variants[@]}"; do
    # shellcheck disable=SC2046
    "${clean_env[@]}" "${!b}" --steps 2 --device cpu --threads 1 --eval-every 0 $(flags "$p") --data "$data" > /dev/null 2>&1
  done
done
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for r in $(seq "$repeats"); do
  for p in "${variants[@]}"; do
    for b in old new; do
      # shellcheck disable=SC2046
      "${clean_env[@]}" "${!b}" --steps "$steps" --device cpu --threads 1 --eval-every 0 --log-every 1000 $(flags "$p") \
        --data "$data" --metrics "$tmp/m.json" > /dev/null 2>&1
      grep '"type": "summary"' "$tmp/m.json" | sed 's/.*"timed_ms_per_step": \([^,}]*\)[,}].*/\1/' >> "$tmp/$b.$p.ms"
    done
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
for p in "${variants[@]}"; do
  o=$(median < "$tmp/old.$p.ms") n=$(median < "$tmp/new.$p.ms")
  of=$(median < "$tmp/old.fp32.ms") nf=$(median < "$tmp/new.fp32.ms")
  printf '%-13s old %8.2f ms (%4.2fx fp32)  new %8.2f ms (%4.2fx fp32)  new/old %4.2f   (old: %s; new: %s)\n' "$p" "$o" \
    "$(awk -v a="$o" -v b="$of" 'BEGIN {print a / b}')" "$n" "$(awk -v a="$n" -v b="$nf" 'BEGIN {print a / b}')" \
    "$(awk -v a="$n" -v b="$o" 'BEGIN {print a / b}')" "$(tr '\n' ' ' < "$tmp/old.$p.ms")" "$(tr '\n' ' ' < "$tmp/new.$p.ms")"
done
