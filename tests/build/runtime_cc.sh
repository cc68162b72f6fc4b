#!/usr/bin/env bash
# Kernels compiled at run time by the training executable (a flag changed
# the plan): the compiler is $CC; --quiet hides the notice; without a
# compiler the error names the flag and why it needs one; --help says so.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
unset KILN_CC
export KILN_CACHE_DIR=$tmp/cache # nothing compiled yet
"$kiln" build examples/mlp.kl -o "$tmp/mlp"
run=(--steps 1 --eval-every 0 --log-every 1)

# $CC is used: a wrapper that leaves a mark and runs cc.
printf '#!/bin/sh\ntouch "%s/cc-ran"\nexec cc "$@"\n' "$tmp" > "$tmp/mycc"
chmod +x "$tmp/mycc"
CC=$tmp/mycc "$tmp/mlp" "${run[@]}" --batch 32 --quiet > "$tmp/quiet.txt" 2>&1 || { cat "$tmp/quiet.txt"; exit 1; }
[ -f "$tmp/cc-ran" ] || { echo "FAIL: CC=$tmp/mycc was not used to compile the kernels for --batch 32"; exit 1; }
! grep -q 'compiling kernels' "$tmp/quiet.txt" || { echo "FAIL: --quiet printed the compiling notice:"; cat "$tmp/quiet.txt"; exit 1; }
! grep -q 'no usable GPU' "$tmp/quiet.txt" || { echo "FAIL: --quiet printed the GPU notice:"; cat "$tmp/quiet.txt"; exit 1; }
echo "ok: CC compiled the kernels for --batch 32, silently under --quiet"

# Without --quiet the notice names the flag.
CC=$tmp/mycc "$tmp/mlp" "${run[@]}" --batch 48 > "$tmp/loud.txt" 2>&1 || { cat "$tmp/loud.txt"; exit 1; }
grep -q '^kiln: compiling kernels for --batch 48 (' "$tmp/loud.txt" || { echo "FAIL: no notice naming --batch 48:"; cat "$tmp/loud.txt"; exit 1; }
echo "ok: $(grep -m1 '^kiln: compiling kernels' "$tmp/loud.txt" | cut -c1-60)..."

# No compiler: exit 1, the flag, the compiler and why.
set +e
CC=/nonexistent/cc "$tmp/mlp" "${run[@]}" --batch 16 --quiet > "$tmp/none.txt" 2>&1
rc=$?
set -e
cat "$tmp/none.txt"
[ $rc = 1 ] || { echo "FAIL: exit status $rc without a compiler, expected 1"; exit 1; }
grep -q '^kiln: error: compiling kernels for --batch 16 failed: /nonexistent/cc: not found' "$tmp/none.txt" \
  || { echo "FAIL: the error does not name --batch 16 and the missing compiler"; exit 1; }
grep -q "not in this executable (it holds those of its train block's settings)" "$tmp/none.txt" \
  || { echo "FAIL: the error does not say why a compiler is needed"; exit 1; }
# Flags that do not change the kernels need no compiler.
CC=/nonexistent/cc "$tmp/mlp" "${run[@]}" --lr 0.5 --seed 3 --quiet > "$tmp/same.txt" 2>&1 \
  || { echo "FAIL: --lr and --seed needed a compiler"; cat "$tmp/same.txt"; exit 1; }
"$tmp/mlp" --help > "$tmp/help.txt"
grep -q 'compiles at start with a C compiler' "$tmp/help.txt" || { echo "FAIL: --help does not say which flags need a C compiler"; exit 1; }
echo "ok: without a compiler --batch 16 is refused with the reason; --lr and --seed run; --help says so"
