#!/usr/bin/env bash
# The training executable with and without memory planning (KILN_MEMPLAN=0)
# trains bit for bit the same: every logged loss and metric, the evaluation
# (which runs in the training arena when planned), and the final checkpoint
# (params and state), for the MLP on Fashion-MNIST and for the CNN in bf16
# with accumulation and recomputation on synthetic data.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
run() { # name exe args...
  local name=$1 exe=$2; shift 2
  "$exe" "$@" --log-every 1 --metrics "$tmp/$name.planned.json" --save "$tmp/$name.planned.ckpt" > "$tmp/$name.planned.txt" 2>&1
  KILN_MEMPLAN=0 "$exe" "$@" --log-every 1 --metrics "$tmp/$name.off.json" --save "$tmp/$name.off.ckpt" > "$tmp/$name.off.txt" 2>&1
  grep '^memory plan:' "$tmp/$name.planned.txt" "$tmp/$name.off.txt"
  # Metrics without timings.
  for v in planned off; do
    sed 's/"samples_per_s": [^,}]*//; s/"ms_per_step": [^,}]*//; s/"epoch_s": [^,}]*//; s/"seconds": [^,}]*//; s/"step_seconds": [^,}]*//; s/"timed_samples_per_s": [^,}]*//; s/"eval_seconds": [^,}]*//; s/"timed_ms_per_step": [^,}]*//; s/"data_wait_s": [^,}]*//; s/"cpu_percent": [^,}]*//; s/"rss_bytes": [^,}]*//; s/"host_cpu_percent": [^,}]*//; s/"host_rss_peak_bytes": [^,}]*//' \
      "$tmp/$name.$v.json" > "$tmp/$name.$v.cmp"
  done
  cmp "$tmp/$name.planned.cmp" "$tmp/$name.off.cmp" || { echo "FAIL: $name: metrics differ"; diff "$tmp/$name.planned.cmp" "$tmp/$name.off.cmp" | head; exit 1; }
  cmp "$tmp/$name.planned.ckpt" "$tmp/$name.off.ckpt" || { echo "FAIL: $name: checkpoints differ"; exit 1; }
  echo "$name: $(grep -c '"type": "train"' "$tmp/$name.planned.json") steps and the evaluation identical, checkpoints identical"
}
"$kiln" build examples/mlp.kl -o "$tmp/mlp"
run mlp "$tmp/mlp" --steps 12 --threads 2
"$kiln" build examples/fashion_cnn.kl -o "$tmp/cnn"
run cnn "$tmp/cnn" --steps 3 --batch 32 --accumulate 2 --precision bf16 --set recompute=auto --data synthetic:400
