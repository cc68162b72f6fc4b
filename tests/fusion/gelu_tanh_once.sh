#!/usr/bin/env bash
# GELU's tanh form computes its tanh once per element in the forward and
# once in the backward (codegen/k_elem.c binds x, x^2 and the tanh of the
# gradient): the CPU kernels of tests/grad/gelu_tanh.kl (f64, training
# step) call tanh twice in all; a gradient whose tree printed the tanh
# three times had four.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
calls=$("$kiln" ir tests/grad/gelu_tanh.kl --kernels | grep -o 'tanh((' | wc -l)
if [ "$calls" -ne 2 ]; then
  echo "FAIL: tests/grad/gelu_tanh.kl's kernels call tanh $calls times; expected 2 (one forward, one backward)"
  exit 1
fi
echo "ok: tanh called twice (forward and backward)"
