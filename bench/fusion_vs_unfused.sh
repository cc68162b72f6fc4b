#!/usr/bin/env bash
# Fused kernels against their parts (issue 32 item 7): runs
# `kiln bench MODEL --check-fusion` on each model, which times every
# kernel of the fused and the unfused training plan (medians of repeats)
# and names each fused kernel slower than the sum of its unfused parts by
# more than the margin. Exits non-zero when any model has one.
#
#   bench/fusion_vs_unfused.sh [MODEL.kl...]
#     default: examples/fashion_cnn.kl examples/mlp.kl tests/fusion/fusion_leaf_run.kl
#   KILN=path/to/kiln (default ./build/kiln), REPEATS (default 20),
#   MARGIN (default 0.25: 25%), BATCH (default: each model's),
#   THREADS (default: kiln's rule)
#
# Small kernels (microseconds) are noisy on a busy machine: use a real
# batch and enough repeats before reading a SLOW line as a regression.
set -euo pipefail
kiln=${KILN:-./build/kiln}
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(examples/fashion_cnn.kl examples/mlp.kl tests/fusion/fusion_leaf_run.kl)
args=(--check-fusion --repeats "${REPEATS:-20}" --margin "${MARGIN:-0.25}")
[ -z "${BATCH:-}" ] || args+=(--batch "$BATCH")
[ -z "${THREADS:-}" ] || args+=(--threads "$THREADS")
failed=0
for m in "${models[@]}"; do
  echo "== $m"
  set +e
  "$kiln" bench "$m" "${args[@]}" | sed -n '/^fusion check:/,$p'
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" = 3 ]; then
    failed=1
  elif [ "$rc" != 0 ]; then
    echo "fusion_vs_unfused: kiln bench $m failed (exit $rc)" >&2
    exit "$rc"
  fi
done
if [ "$failed" = 1 ]; then
  echo "fusion_vs_unfused: a fused kernel is slower than its parts (SLOW lines above)"
  exit 1
fi
echo "fusion_vs_unfused: every fused kernel within the margin of its parts"
