#!/usr/bin/env bash
# The hand-written CPU attention kernels (runtime/cpu/cpu_attn.c) of a git
# revision against the working tree's, on the GPT example's heads (64 x
# T 128 x d 32, causal): each built with its own compile options (read
# from that revision's CMakeLists.txt line for cpu_attn.c), timed by
# bench/attn_native_time.c (best CPU time of REPEATS runs, one thread),
# old and new alternated ROUNDS times.
#
#   bench/attn_native_ab.sh OLD_REV [REPEATS] [ROUNDS]   (defaults 15, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
old_rev=$1 repeats=${2:-15} rounds=${3:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The options CMakeLists.txt gives cpu_attn.c at a revision.
options() { # CMAKELISTS
  if grep -q 'set(KILN_CPU_ATTN_OPTIONS' "$1"; then
    sed -n 's/^set(KILN_CPU_ATTN_OPTIONS \(.*\))$/\1/p' "$1"
  else
    sed -n 's/.*cpu_attn.c PROPERTIES COMPILE_OPTIONS "\([^"]*\)".*/\1/p' "$1" | tr ';' ' '
  fi
}
mkdir -p "$tmp/old/runtime/cpu" "$tmp/old/base" "$tmp/old/codegen"
for f in runtime/cpu/cpu_attn.c runtime/cpu/cpu_attn.h base/scalar.h base/support.h codegen/attn_native.h CMakeLists.txt; do
  # (before runtime/ split by concern the kernels were runtime/cpu_attn.*)
  git show "$old_rev:$f" > "$tmp/old/$f" 2> /dev/null || git show "$old_rev:${f/runtime\/cpu\//runtime/}" > "$tmp/old/$f" 2> /dev/null ||
    cp "$f" "$tmp/old/$f"
done
for v in old new; do
  root=$([ $v = old ] && echo "$tmp/old" || pwd)
  # shellcheck disable=SC2046
  cc $(options "$root/CMakeLists.txt") -fopenmp -std=gnu11 -I"$root" -I"$root/runtime/cpu" \
    -DATTN_SRC="\"$root/runtime/cpu/cpu_attn.c\"" bench/attn_native_time.c -o "$tmp/$v.bin" -lm
done
echo "old: $old_rev ($(options "$tmp/old/CMakeLists.txt")); new: working tree ($(options CMakeLists.txt))"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for v in old new; do
    echo "round $r $v: $(OMP_NUM_THREADS=1 "$tmp/$v.bin" "$repeats" | tr -s ' ' | paste -sd ';')"
  done
done
