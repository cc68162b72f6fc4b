#!/usr/bin/env bash
# The CPU-dispatch sources compile under clang as well as gcc (the fuzz
# build is clang-only): clang 14's __builtin_cpu_supports rejects "f16c"
# and "amx-tile", so no source calls it; runtime/cpu/cpu_features.c (cpuid)
# answers instead. Then clang -fsyntax-only on the sources that dispatch.
# Exits 77 (skipped) without clang.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
fail=0
hits=$(cd "$root" && grep -rnE '__builtin_cpu_supports[[:space:]]*\(' --include='*.c' --include='*.h' \
       base ir compiler passes codegen runtime driver 2>/dev/null)
if [ -n "$hits" ]; then
  echo "FAIL: __builtin_cpu_supports outside runtime/cpu/cpu_features.c (use kl_cpu_has):"; echo "$hits"; fail=1
else
  echo "ok: no __builtin_cpu_supports in the library"
fi
cc=$(command -v clang || command -v clang-14) || { echo "skip: no clang"; [ $fail -eq 0 ] && exit 77; exit 1; }
for f in runtime/cpu/cpu_features.c runtime/exec/backend_cpu.c runtime/cpu/gemm16.c runtime/cpu/f16_rows.c; do
  if out=$(cd "$root" && "$cc" -std=gnu11 -fsyntax-only -fopenmp -Wall -Wextra -Werror -I. -Iruntime "$f" 2>&1); then
    echo "ok: clang compiles $f"
  else
    echo "FAIL: clang on $f:"; echo "$out" | head -5; fail=1
  fi
done
exit $fail
