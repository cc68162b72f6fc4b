#!/usr/bin/env bash
# Global avgpool's gradient is the mean's (issue 32 item 8): after
# autodiff a pool whose one window covers the whole plane leaves no
# avgpool_grad (a window gather over all H*W positions for each input),
# while an overlapping pool still gets one. The gradient's values are
# checked by grad.avgpool_global and reference.grad.avgpool_global.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
fail=0
count() { "$kiln" ir "$1" --after autodiff 2>&1 | grep -c 'avgpool_grad'; }
n=$(count tests/grad/avgpool_global.kl)
if [ "$n" != "1" ]; then
  echo "FAIL: tests/grad/avgpool_global.kl: $n avgpool_grad after autodiff, expected 1 (the 1 x 7 strip only)"
  "$kiln" ir tests/grad/avgpool_global.kl --after autodiff 2>&1 | grep -n 'pool\|broadcast'
  fail=1
else
  echo "ok: global avgpool's gradient is a broadcast divide"
fi
n=$(count tests/grad/avgpool.kl)
if [ "$n" != "2" ]; then
  echo "FAIL: tests/grad/avgpool.kl: $n avgpool_grad after autodiff, expected 2"
  fail=1
else
  echo "ok: windowed pools keep their gather"
fi
exit $fail
