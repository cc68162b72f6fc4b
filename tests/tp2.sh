#!/usr/bin/env bash
# Tensor parallelism in combination (README, "Tensor parallel"): padded
# split sizes, gradient clipping, bf16/fp16 loss scaling, accumulation,
# ZeRO on the data-parallel rest, the CNN's split head, checkpoints across
# worlds, against one rank with the same global batch.
#
#   tp2.sh KILN CASE   CASE: pad | clip | fp16 | resume | zero | cnn | memory
#
# As tests/tp.sh (helpers: tests/ranks_helpers.bash): 20 steps' losses
# (rtol 1e-5) and the final params and optimizer state of the
# checkpoints, which hold the split params whole and unpadded (rtol 1e-5),
# mpirun --oversubscribe, one thread per rank. tests/tp2_mlp.kl's pair
# has 98 units: T = 3 pads them to 102 (34 a rank), T = 4 to 100.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
kiln=$1
case_=$2
here=$(cd "$(dirname "$0")" && pwd)
new_tmpdir
source "$here/ranks_helpers.bash"
model=tests/tp2_mlp.kl
build_tp() { "$kiln" build "$model" -o "$tmp/tp"; }

case $case_ in
pad)
  # T = 2 (no padding), 3 and 4 (padded), and T = 2 x data parallel 2;
  # accumulate 2 at T = 3 x 1 and at T = 2 x 2.
  build_tp
  one ref "$tmp/tp" --batch 48
  ranks 2 t2 "$tmp/tp" --batch 48 --tensor-parallel 2
  same ref t2
  ranks 3 t3 "$tmp/tp" --batch 48 --tensor-parallel 3
  same ref t3
  ranks 4 t4 "$tmp/tp" --batch 48 --tensor-parallel 4
  same ref t4
  ranks 4 t2d2 "$tmp/tp" --batch 24 --tensor-parallel 2
  same ref t2d2
  one acc "$tmp/tp" --batch 24 --accumulate 2
  ranks 3 t3acc "$tmp/tp" --batch 24 --accumulate 2 --tensor-parallel 3
  same acc t3acc
  ranks 4 t2d2acc "$tmp/tp" --batch 12 --accumulate 2 --tensor-parallel 2
  same acc t2d2acc
  # The checkpoint holds the pair unpadded: 64 x 98, 98, 98 x 48.
  "$kiln" ckpt "$tmp/t3.ckpt" > "$tmp/t3.txt"
  for v in 'dense.2.w [64,98]' 'dense.2.b [98]' 'dense.3.w [98,48]' 'dense.3.w.adam_m [98,48]'; do
    awk -v n="${v% *}" -v s="${v#* }" '$1 == n && $4 == s { found = 1 } END { exit !found }' "$tmp/t3.txt" ||
      { echo "FAIL: the T = 3 checkpoint does not hold $v"; cat "$tmp/t3.txt"; exit 1; }
  done
  ! grep -q tp_mask "$tmp/t3.txt" || { echo "FAIL: the checkpoint holds a mask"; exit 1; }
  echo "ok: T = 2, 3, 4 and 2 x 2, accumulate 2: one rank's losses and values; checkpoints unpadded"
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "tp2.$case_: ok"
