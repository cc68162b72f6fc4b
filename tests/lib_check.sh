#!/usr/bin/env bash
# The shared test settings (tests/lib.sh) reach every test script and
# every executable they start:
#  - each script under tests/ sources lib.sh (but tests/gpu/, which runs
#    on a GPU and compares within bounds, and tests/fuzz/, not a test);
#  - under lib.sh an executable started without --threads trains on one
#    thread, and the CPU backend takes OMP_NUM_THREADS as its default.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
kiln=$1
root=$(cd "$(dirname "$0")/.." && pwd)
fail=0
while IFS= read -r f; do
  case $f in
    "$root"/tests/gpu/* | "$root"/tests/fuzz/* | "$root"/tests/lib.sh) continue ;;
  esac
  if ! grep -qE '^source "\$\(dirname "\$0"\)/(\.\./)*lib\.sh"$' "$f"; then
    echo "FAIL: ${f#"$root"/} does not source tests/lib.sh"
    fail=1
  fi
done < <(find "$root/tests" -name '*.sh' | sort)
[ $fail = 0 ] && echo "every test script sources tests/lib.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kiln" build examples/mlp.kl -o "$tmp/mlp"
threads() { # the thread count in the start-up line of a run with these args
  "$@" --steps 1 --eval-every 0 --log-every 1 2>&1 | sed -n 's/.*cpu, \([0-9]*\) threads\{0,1\} .*/\1/p' | head -1
}
got=$(threads "$tmp/mlp")
[ "$got" = 1 ] || { echo "FAIL: under lib.sh a run without --threads used '$got' threads, expected 1"; fail=1; }
got=$(OMP_NUM_THREADS=3 threads "$tmp/mlp")
[ "$got" = 3 ] || { echo "FAIL: with OMP_NUM_THREADS=3 the run used '$got' threads"; fail=1; }
got=$(OMP_NUM_THREADS=3 threads "$tmp/mlp" --threads 2)
[ "$got" = 2 ] || { echo "FAIL: --threads 2 with OMP_NUM_THREADS=3 used '$got' threads"; fail=1; }
[ $fail = 0 ] && echo "runs take one thread under lib.sh, OMP_NUM_THREADS otherwise, and --threads wins"
exit $fail
