#!/usr/bin/env bash
# Tensor parallelism (README, "Many ranks", "Tensor parallel"):
# tests/ranks/tp_mlp.kl's column/row pair split across T ranks, against one rank
# with the same global batch.
#
#   tp.sh KILN CASE   CASE: mlp | resume | ir | refused | syncbn
#
# As tests/ranks/data_parallel.sh (whose helpers, tests/ranks/helpers.bash, this uses): 20
# steps' losses and the final params of the checkpoints, which hold the
# split params whole: fp32 within the reorder bound (near32: the split
# layers sum in another order at every step), bf16 and fp16 within their
# bound (near), the exact mode to the bit (same); mpirun --oversubscribe,
# one thread per rank.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/ranks/helpers.bash"
model=tests/ranks/tp_mlp.kl
build_tp() { "$kiln" build "$model" -o "$tmp/tp"; }

case $case_ in
mlp)
  build_tp
  one ref "$tmp/tp" --batch 48
  # T = 2 on 2 ranks; T = 2 x data parallel 2 on 4 ranks (each group
  # reads 24 of the 48 rows); T = 3 on 3 ranks (T = 1 x 3 is data
  # parallel alone, as tests/ranks/data_parallel.sh).
  ranks 2 t2 "$tmp/tp" --batch 48 --tensor-parallel 2
  near32 ref t2
  ranks 4 t2d2 "$tmp/tp" --batch 24 --tensor-parallel 2
  near32 ref t2d2
  ranks 3 t3 "$tmp/tp" --batch 48 --tensor-parallel 3
  near32 ref t3
  # accumulate 2: micro-batches of 24 on one rank, of 12 on each group of
  # T = 2 x 2 (the split params' accumulators are gathered too).
  one acc "$tmp/tp" --batch 24 --accumulate 2
  ranks 4 racc "$tmp/tp" --batch 12 --accumulate 2 --tensor-parallel 2
  near32 acc racc
  # bf16 and fp16: the row split's partial sums come out of the GEMM in
  # fp32, are all-reduced in fp32 and rounded once after (tp_reduce =
  # fp32, the default; passes/precision.c), so only the order of fp32
  # sums differs from one rank: T = 2 within the 16-bit bound (near,
  # tests/ranks/helpers.bash); tp_reduce = bf16 (the partial sums rounded
  # to bf16 and all-reduced so) too, and tp_reduce = exact (f64 sums)
  # gives one rank's bits. The control: half the batch is outside.
  for p in bf16 fp16; do
    one one$p "$tmp/tp" --batch 48 --precision $p
    ranks 2 r$p "$tmp/tp" --batch 48 --tensor-parallel 2 --precision $p
    near $p one$p r$p
  done
  ranks 2 rlow "$tmp/tp" --batch 48 --tensor-parallel 2 --precision bf16 --set tp_reduce=bf16
  near bf16 onebf16 rlow
  one onex "$tmp/tp" --batch 48 --precision fp16 --set tp_reduce=exact
  ranks 2 rx "$tmp/tp" --batch 48 --tensor-parallel 2 --precision fp16 --set tp_reduce=exact
  same onex rx
  one halffp16 "$tmp/tp" --batch 24 --precision fp16
  far fp16 onefp16 halffp16
  # With KILN_MPI=0 each process is a world of one, where T = 2 is
  # refused; and evaluation on 2 x 2 ranks equals one rank's.
  if KILN_MPI=0 "${mpi[@]}" -np 2 "$tmp/tp" "${common[@]}" --tensor-parallel 2 > /dev/null 2> "$tmp/err.txt"; then
    echo "FAIL: T = 2 on a world of one rank was accepted"; exit 1
  fi
  grep -q "tensor_parallel = 2 does not divide the world of 1 rank" "$tmp/err.txt" ||
    { echo "FAIL: no clear error for T = 2 on one rank"; cat "$tmp/err.txt"; exit 1; }
  "$tmp/tp" "${loud[@]}" --batch 48 --eval-every 20 > "$tmp/e1.txt"
  "${mpi[@]}" -np 4 "$tmp/tp" "${loud[@]}" --batch 24 --tensor-parallel 2 --eval-every 20 > "$tmp/e4.txt"
  e1=$(grep -o 'eval  loss [0-9.]*  accuracy [0-9.]*' "$tmp/e1.txt" | tail -1)
  e4=$(grep -o 'eval  loss [0-9.]*  accuracy [0-9.]*' "$tmp/e4.txt" | tail -1)
  [ -n "$e1" ] && [ "$e1" = "$e4" ] || { echo "FAIL: evaluation: one rank '$e1', T = 2 x 2 '$e4'"; exit 1; }
  grep -q "^tensor parallel: groups of 2 ranks x 2 data-parallel" "$tmp/e4.txt" ||
    { echo "FAIL: no tensor-parallel line at start-up"; cat "$tmp/e4.txt"; exit 1; }
  echo "ok: evaluation on 2 x 2 ranks: $e4, as one rank"
  ;;
resume)
  # Saved at T = 2 on 2 ranks at step 10, resumed at T = 1 on one rank;
  # saved on one rank, resumed at T = 2 x 2 on 4 ranks: steps 11-20 as in
  # an uninterrupted run, and the same final values.
  build_tp
  one full "$tmp/tp" --batch 48
  ranks 2 half2 "$tmp/tp" --batch 48 --tensor-parallel 2 --steps 10
  "$tmp/tp" "${common[@]}" --batch 48 --resume "$tmp/half2.ckpt" --metrics "$tmp/on1.json" --save "$tmp/on1.ckpt" > /dev/null
  near32 full on1
  one half1 "$tmp/tp" --batch 48 --steps 10
  "${mpi[@]}" -np 4 "$tmp/tp" "${common[@]}" --batch 24 --tensor-parallel 2 --resume "$tmp/half1.ckpt" \
    --metrics "$tmp/on4.json" --save "$tmp/on4.ckpt" > /dev/null
  near32 full on4
  # --export at T = 2 writes the split params whole (64 x 96, 96 x 48).
  "${mpi[@]}" -np 2 "$tmp/tp" "${common[@]}" --batch 48 --tensor-parallel 2 --steps 2 --export "$tmp/e.safetensors" > /dev/null
  head -c 600 "$tmp/e.safetensors" | grep -aq '"dense.2.w":{"dtype":"F32","shape":\[64,96\]' &&
    head -c 600 "$tmp/e.safetensors" | grep -aq '"dense.3.w":{"dtype":"F32","shape":\[96,48\]' ||
    { echo "FAIL: --export at T = 2 did not write the split params whole"; head -c 600 "$tmp/e.safetensors"; exit 1; }
  ;;
ir)
  # kiln ir shows the pair's collectives: a tp_copy before the column
  # matmul, the all_reduce over the group after the row matmul and, in
  # backward, tp_copy's all_reduce; the cut params' shapes; the memory
  # per rank (tp_mlp: 784x64 + 64 + 96 + 48 + 480 + 10 replicated =
  # 50778, 64x96 + 96 + 96x48 = 10848 split, 5424 per rank at T = 2).
  "$kiln" ir "$model" --after shard --ranks 4 --set tensor_parallel=2 > "$tmp/ir.txt"
  grep -q '^  %x.1.tp_copy : f32\[48,64\] = tp_copy(%x.1) {ranks = 2}' "$tmp/ir.txt" &&
    grep -q '= all_reduce(%t[0-9]*) {reduce = sum, ranks = 2, group = tp}' "$tmp/ir.txt" &&
    grep -q '^  backward .* = all_reduce(.*) {reduce = sum, ranks = 2, group = tp}' "$tmp/ir.txt" &&
    grep -q '^  update .* = all_reduce(%bucket.0) {reduce = sum, ranks = 2}' "$tmp/ir.txt" &&
    grep -q '^  param %dense.2.w : f32\[64,48\] .*tp_axis = 1, tp_ranks = 2' "$tmp/ir.txt" &&
    grep -q '^  param %dense.2.b : f32\[48\] .*tp_axis = 0, tp_ranks = 2' "$tmp/ir.txt" &&
    grep -q '^  param %dense.3.w : f32\[48,48\] .*tp_axis = 0, tp_ranks = 2' "$tmp/ir.txt" &&
    grep -q '^  param %dense.3.b : f32\[48\] {init = zeros} ' "$tmp/ir.txt" &&
    grep -q '^# tensor parallel: groups of 2 ranks x 2 data-parallel; params per rank 56202 = 0.225 MB (5424 split, 1/2 of 10848; 50778 replicated), one rank would hold 61626' "$tmp/ir.txt" ||
    { echo "FAIL: kiln ir --after shard --ranks 4, tensor_parallel = 2: not the expected splits and collectives"; cat "$tmp/ir.txt"; exit 1; }
  # The dump re-reads and reprints unchanged (the IR text parser knows
  # tp_copy and group; the world is the buckets' 2 ranks x the group's 2).
  "$kiln" ir "$tmp/ir.txt" --after lower -o "$tmp/re.txt"
  cmp "$tmp/ir.txt" "$tmp/re.txt" || { echo "FAIL: the dump does not reprint unchanged"; diff "$tmp/ir.txt" "$tmp/re.txt" | head; exit 1; }
  # T = 1: the annotations change nothing.
  "$kiln" ir "$model" --after shard > "$tmp/t1.txt"
  ! grep -q 'tp_copy\|group = tp' "$tmp/t1.txt" || { echo "FAIL: T = 1 split something"; exit 1; }
  echo "ok: kiln ir shows the splits, the collectives and the memory per rank"
  # bf16 and fp16 (tp_reduce, passes/precision.c): by default no f64 value
  # at all, the partial sums (the row split's forward, the column split's
  # input gradient) out of their GEMMs in fp32 and all-reduced in fp32;
  # tp_reduce = bf16 all-reduces bf16 partial sums; exact puts the split
  # layers' GEMMs and sums in f64 (on one rank too).
  for p in bf16 fp16; do
    "$kiln" ir "$model" --after all --ranks 2 --set tensor_parallel=2 --set precision=$p > "$tmp/$p.txt"
    ! grep -q 'f64' "$tmp/$p.txt" || { echo "FAIL: $p: an f64 value by default"; grep 'f64' "$tmp/$p.txt" | head -3; exit 1; }
    [ "$(grep -v '^  update' "$tmp/$p.txt" | grep -c ': f32\[[0-9,]*\] = all_reduce(.*group = tp}')" -eq 2 ] &&
      grep -q ': f32\[48,48\] = matmul(.*out = f32, split = row}' "$tmp/$p.txt" ||
      { echo "FAIL: $p: the partial sums are not fp32 GEMM results all-reduced in fp32"; grep 'all_reduce\|split = row' "$tmp/$p.txt"; exit 1; }
  done
  "$kiln" ir "$model" --after all --ranks 2 --set tensor_parallel=2 --set precision=bf16 --set tp_reduce=bf16 > "$tmp/low.txt"
  [ "$(grep -c ': bf16\[[0-9,]*\] = all_reduce(.*group = tp}' "$tmp/low.txt")" -eq 2 ] && ! grep -q 'f64' "$tmp/low.txt" ||
    { echo "FAIL: tp_reduce = bf16: not bf16 all-reduces"; grep 'all_reduce' "$tmp/low.txt"; exit 1; }
  "$kiln" ir "$model" --after all --set precision=fp16 --set tp_reduce=exact > "$tmp/exact.txt"
  grep -q ': f64\[48,48\] = matmul(.*out = f64, split = row}' "$tmp/exact.txt" ||
    { echo "FAIL: tp_reduce = exact: the row split's GEMM is not f64 on one rank"; exit 1; }
  echo "ok: bf16/fp16 all-reduce fp32 partial sums by default (no f64), bf16 with tp_reduce = bf16, f64 with exact"
  ;;
refused)
  # Every refusal names the file and line (no MPI needed: the pass checks
  # the structure at any T; T > 1 without ranks compiles for a world of T).
  refuse() { # refuse NAME EXPECTED MODEL-LINES... (in place of the pair)
    local name=$1 want=$2; shift 2
    { sed -n '1,/^  x = relu(dense(x, 64))$/p' "$model"; printf '%s\n' "$@"; sed -n '/^  logits = /,$p' "$model"; } > "$tmp/$name.kl"
    if "$kiln" ir "$tmp/$name.kl" --after tensor_parallel --set tensor_parallel=2 > /dev/null 2> "$tmp/$name.err"; then
      echo "FAIL: $name was accepted"; cat "$tmp/$name.kl"; exit 1
    fi
    grep -q "$name.kl:[0-9]*:[0-9]*: .*$want" "$tmp/$name.err" || { echo "FAIL: $name: expected '$want'"; cat "$tmp/$name.err"; exit 1; }
    echo "ok: $name: $(head -1 "$tmp/$name.err")"
  }
  refuse row_alone "split = row needs the result of a split = column matmul" '  x = relu(dense(x, 48, split = row))'
  refuse column_alone "split = column has no matching split = row" '  x = relu(dense(x, 48, split = column))' \
    '  x = relu(dense(x, 48))'
  refuse not_matmul "split = column applies to matmul and to calls of defs with one matmul (dense), not to relu" \
    '  x = relu(x, split = column)'
  refuse bad_word "split must be column or row" '  x = relu(dense(x, 96, split = rows))'
  refuse softmax_between "reaches softmax, which tensor parallelism cannot split" \
    '  x = softmax(dense(x, 96, split = column))' '  x = relu(dense(x, 48, split = row))'
  refuse transposed "needs x @ w with w a 2-D param" '  param v : [96, 64] init = kaiming' \
    '  x = relu(matmul(x, v, transpose_b = 1, split = column))' '  x = relu(dense(x, 48, split = row))'
  # A world T does not divide and T > 1 with no split (sizes T does not
  # divide, clip, fp16, zero1/2 and zero3's refusal: tests/ranks/tp_combined.sh).
  if "$kiln" ir "$model" --after shard --ranks 3 --set tensor_parallel=2 > /dev/null 2> "$tmp/w.err"; then
    echo "FAIL: T = 2 on 3 ranks was accepted"; exit 1
  fi
  grep -q "tensor_parallel = 2 does not divide the world of 3 ranks" "$tmp/w.err" || { cat "$tmp/w.err"; exit 1; }
  if "$kiln" ir examples/mlp.kl --after shard --ranks 2 --set tensor_parallel=2 > /dev/null 2> "$tmp/n.err"; then
    echo "FAIL: T = 2 without any split was accepted"; exit 1
  fi
  grep -q "no call is marked split = column|row" "$tmp/n.err" || { cat "$tmp/n.err"; exit 1; }
  echo "ok: T not dividing the world, T with no split refused"
  if "$kiln" ir examples/fashion_cnn.kl --after lower --set sync_batchnorm=maybe > /dev/null 2> "$tmp/s.err"; then
    echo "FAIL: sync_batchnorm = maybe was accepted"; exit 1
  fi
  grep -q "sync_batchnorm must be true or false" "$tmp/s.err" || { cat "$tmp/s.err"; exit 1; }
  echo "ok: sync_batchnorm must be true or false"
  # tp_reduce: a word of four, a 16-bit dtype only the run's own, exact
  # only under bf16/fp16.
  refuse_set() { # refuse_set EXPECTED --set ARGS...
    local want=$1; shift
    if "$kiln" ir "$model" --after all "$@" > /dev/null 2> "$tmp/r.err"; then
      echo "FAIL: $* was accepted"; exit 1
    fi
    grep -qF "$want" "$tmp/r.err" || { echo "FAIL: $*: expected '$want'"; cat "$tmp/r.err"; exit 1; }
    echo "ok: $*: $(head -1 "$tmp/r.err")"
  }
  refuse_set "tp_reduce must be fp32, bf16, fp16 or exact" --set tp_reduce=f64
  refuse_set "tp_reduce = fp16 needs precision = fp16, but the run's precision is bf16" --set precision=bf16 --set tp_reduce=fp16
  refuse_set "tp_reduce = exact needs precision = bf16 or fp16, but the run's precision is fp32" --set tp_reduce=exact
  ;;
syncbn)
  # sync_batchnorm: fashion_cnn (two batch norms) on 2 ranks of batch 4
  # equals one rank of batch 8: the same 10 losses (rtol 1e-5) and final
  # values, running statistics included, within rtol 5e-3 (one rank's
  # batch-norm kernel sums x and x^2 in one pass, the synced graph sums
  # (x - mean)^2 in two: after 10 Adam steps the largest difference is
  # 1.03e-3 of a value's magnitude, in a beta). Without sync the
  # ranks normalise over their own 4 rows, and the first step's loss
  # already differs (3.60305 against 3.59907).
  build fashion_cnn
  one ref "$tmp/fashion_cnn" --batch 8 --steps 10
  ranks 2 sync "$tmp/fashion_cnn" --batch 4 --steps 10 --sync-batchnorm true
  compare losses "$tmp/ref.json" "$tmp/sync.json" 1e-5 || { echo "FAIL: sync_batchnorm: losses differ"; exit 1; }
  compare params "$tmp/ref.ckpt" "$tmp/sync.ckpt" 5e-3 || { echo "FAIL: sync_batchnorm: final values differ"; exit 1; }
  ranks 2 local "$tmp/fashion_cnn" --batch 4 --steps 10
  if compare losses "$tmp/ref.json" "$tmp/local.json" 1e-3 > /dev/null; then
    echo "FAIL: without sync_batchnorm 2 ranks of batch 4 match one rank of batch 8: the test sees nothing"; exit 1
  fi
  echo "ok: without sync_batchnorm the losses differ from one rank's, as they should"
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "tp.$case_: ok"
