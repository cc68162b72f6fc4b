#!/usr/bin/env bash
# The same kernels of a model from two Kiln builds, timed against each
# other (for changes to the kernels' prelude or code generation that keep
# the plan: same kernel names in both).
#
#   bench/kernel_ab.sh OLD NEW MODEL.kl [PRECISION] [OPS_REGEX] [REPEATS]
#     (defaults: fp16, 'conv2d|maxpool|batchnorm|relu_grad|cast \+ div', 5)
#
# Kernels pair by name, or by position when both files hold the same
# plan (same kernel comments in the same order; a changed kernel has a
# new name). OLD and NEW are Kiln executables, or kernel files one wrote with
# `kiln ir MODEL.kl --set precision=P --kernels > FILE.c` (keep one from
# before a change). The kernels are compiled with the flags of
# runtime/exec/jit_cpu.c's kl_cc_flags() (repeated here).
# Prints each kernel whose comment (its ops) matches OPS_REGEX: best CPU
# time of REPEATS runs, old and new alternated, one thread, and the ratio;
# then the total. Only kernels whose buffers hold float data (no integer
# indices such as labels) and fit 40 MiB: see bench/kernel_ab.c.
set -euo pipefail
old=$1 new=$2 model=$3 prec=${4:-fp16} ops=${5:-'conv2d|maxpool|batchnorm|relu_grad|cast \+ div'} repeats=${6:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc=(cc -O3 -march=native -fopenmp -std=gnu11 -ffp-contract=off -fno-tree-slp-vectorize -fno-math-errno -fPIC -shared -w)
for v in old new; do
  src=${!v}
  case $src in
    *.c) cp "$src" "$tmp/$v.c" ;;
    *) "$src" ir "$model" --set precision="$prec" --kernels > "$tmp/$v.c" ;;
  esac
  "${cc[@]}" "$tmp/$v.c" -o "$tmp/$v.so" -lm
done
cc -O2 "$(dirname "$0")/kernel_ab.c" -o "$tmp/kernel_ab" -ldl
# Kernels in file order with their comments; a kernel whose code changed
# has a new name (a hash of its code), so when both files hold the same
# plan (the same comments in the same order) kernels pair by position.
list() { awk '/^\/\* /{c=$0} /^void kk_/{n=$2; sub(/\(.*/,"",n); print n "\t" c}' "$1"; }
list "$tmp/old.c" > "$tmp/old.list"
list "$tmp/new.c" > "$tmp/new.list"
if cmp -s <(cut -f2 "$tmp/old.list") <(cut -f2 "$tmp/new.list"); then
  pairs=$(paste "$tmp/old.list" "$tmp/new.list" | awk -F'\t' '{print $1 ":" $3 "\t" $2}')
else
  pairs=$(awk -F'\t' '{print $1 ":" $1 "\t" $2}' "$tmp/new.list")
fi
mapfile -t kernels < <(printf '%s\n' "$pairs" | awk -F'\t' -v ops="$ops" '$2 ~ ops {print $1}' | sort -u)
echo "$model $prec: ${#kernels[@]} kernels matching '$ops', best of $repeats, one thread"
OMP_NUM_THREADS=1 "$tmp/kernel_ab" "$tmp/old.so" "$tmp/new.so" "$repeats" "${kernels[@]}"
