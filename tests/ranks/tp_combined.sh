#!/usr/bin/env bash
# Tensor parallelism in combination (README, "Tensor parallel"): padded
# split sizes, gradient clipping, bf16/fp16 loss scaling, accumulation,
# ZeRO on the data-parallel rest, the CNN's split head, checkpoints across
# worlds, against one rank with the same global batch.
#
#   tp_combined.sh KILN CASE   CASE: pad | clip | fp16 | resume | zero | cnn | memory
#
# As tests/ranks/tp.sh (helpers: tests/ranks/helpers.bash): 20 steps' losses
# and the final params of the checkpoints, which hold the split params
# whole and unpadded (fp32 within the reorder bound, near32; bf16/fp16
# within theirs, near),
# mpirun --oversubscribe, one thread per rank. tests/ranks/tp_padded_mlp.kl's pair
# has 98 units: T = 3 pads them to 99 (33 a rank), T = 4 to 100.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/ranks/helpers.bash"
model=tests/ranks/tp_padded_mlp.kl
build_tp() { "$kiln" build "$model" -o "$tmp/tp"; }

case $case_ in
pad)
  # T = 2 (no padding), 3 and 4 (padded), and T = 2 x data parallel 2;
  # accumulate 2 at T = 3 x 1 and at T = 2 x 2.
  build_tp
  one ref "$tmp/tp" --batch 48
  ranks 2 t2 "$tmp/tp" --batch 48 --tensor-parallel 2
  near32 ref t2
  ranks 3 t3 "$tmp/tp" --batch 48 --tensor-parallel 3
  near32 ref t3
  ranks 4 t4 "$tmp/tp" --batch 48 --tensor-parallel 4
  near32 ref t4
  ranks 4 t2d2 "$tmp/tp" --batch 24 --tensor-parallel 2
  near32 ref t2d2
  one acc "$tmp/tp" --batch 24 --accumulate 2
  ranks 3 t3acc "$tmp/tp" --batch 24 --accumulate 2 --tensor-parallel 3
  near32 acc t3acc
  # The 2 x 2 run's micro-batch is 12: its reference runs micro-batches
  # of 12 too (x 4), since OpenBLAS may round a GEMM of 12 rows apart
  # from one of 24, and Adam turns a near-zero gradient's last bit into a
  # whole step (on an AVX-512 CPU one rank's --batch 24 -a 2 and
  # --batch 12 -a 4 part at step 14 by 3e-5).
  one acc12 "$tmp/tp" --batch 12 --accumulate 4
  ranks 4 t2d2acc "$tmp/tp" --batch 12 --accumulate 2 --tensor-parallel 2
  near32 acc12 t2d2acc
  # The checkpoint holds the pair unpadded: 64 x 98, 98, 98 x 48.
  "$kiln" ckpt "$tmp/t3.ckpt" > "$tmp/t3.txt"
  for v in 'dense.2.w [64,98]' 'dense.2.b [98]' 'dense.3.w [98,48]' 'dense.3.w.adam_m [98,48]'; do
    awk -v n="${v% *}" -v s="${v#* }" '$1 == n && $4 == s { found = 1 } END { exit !found }' "$tmp/t3.txt" ||
      { echo "FAIL: the T = 3 checkpoint does not hold $v"; cat "$tmp/t3.txt"; exit 1; }
  done
  ! grep -q tp_mask "$tmp/t3.txt" || { echo "FAIL: the checkpoint holds a mask"; exit 1; }
  # --export at T = 3 writes the pair whole and unpadded; evaluation at
  # T = 3 equals one rank's.
  "$tmp/tp" "${loud[@]}" --batch 48 --eval-every 20 > "$tmp/e1.txt"
  "${mpi[@]}" -np 3 "$tmp/tp" "${loud[@]}" --batch 48 --tensor-parallel 3 --eval-every 20 --export "$tmp/e.safetensors" > "$tmp/e3.txt"
  e1=$(grep -o 'eval  loss [0-9.]*  accuracy [0-9.]*' "$tmp/e1.txt" | tail -1)
  e3=$(grep -o 'eval  loss [0-9.]*  accuracy [0-9.]*' "$tmp/e3.txt" | tail -1)
  [ -n "$e1" ] && [ "$e1" = "$e3" ] || { echo "FAIL: evaluation: one rank '$e1', T = 3 '$e3'"; exit 1; }
  python3 - "$tmp/e.safetensors" <<'PY' || { echo "FAIL: --export at T = 3"; exit 1; }
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
shapes = {k: v["shape"] for k, v in h.items() if k != "__metadata__"}
want = {"dense.2.w": [64, 98], "dense.2.b": [98], "dense.3.w": [98, 48]}
assert all(shapes.get(k) == v for k, v in want.items()) and not any("tp_mask" in k for k in shapes), shapes
PY
  echo "ok: T = 2, 3, 4 and 2 x 2, accumulate 2: one rank's losses and values; checkpoints and --export unpadded; $e3 at T = 3 as on one rank"
  ;;
clip)
  # clip = 0.2 clips every step here (the global norm is above it): the
  # norm is the whole model's on every rank (split params' squares summed
  # over the group, replicated ones once), so T = 3 and 2 x 2 clip as one
  # rank does; without clip the losses differ from step 3.
  # The fp32 reorder bound's twin (near32, tests/ranks/helpers.bash): one
  # rank from its own initial weights, each moved by one ulp, is within
  # it; the controls (no clip, half the batch) are not.
  build_tp
  one ref "$tmp/tp" --batch 48 --set clip=0.2 --save-init "$tmp/init.ckpt"
  ranks 3 t3 "$tmp/tp" --batch 48 --tensor-parallel 3 --set clip=0.2
  near32 ref t3
  ranks 4 t2d2 "$tmp/tp" --batch 24 --tensor-parallel 2 --set clip=0.2
  near32 ref t2d2
  "$kiln" export "$tmp/init.ckpt" -o "$tmp/init.safetensors" > /dev/null
  python3 - "$tmp/init.safetensors" "$tmp/ulp.safetensors" <<'PY'
import json, random, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
base, rng = 8 + n, random.Random(2)
for name, t in json.loads(b[8:base]).items():
    if name == "__metadata__":
        continue
    for o in range(base + t["data_offsets"][0], base + t["data_offsets"][1], 4):
        u = struct.unpack_from("<I", b, o)[0]
        if u & 0x7FFFFFFF:  # not a zero: one ulp up or down
            struct.pack_into("<I", b, o, u + rng.choice((-1, 1)))
open(sys.argv[2], "wb").write(b)
PY
  one ulp "$tmp/tp" --batch 48 --set clip=0.2 --init "$tmp/ulp.safetensors"
  near32 ref ulp
  echo "ok: one rank from its initial weights moved by one ulp is within the fp32 reorder bound"
  one noclip "$tmp/tp" --batch 48
  far32 ref noclip
  one half "$tmp/tp" --batch 24 --set clip=0.2
  far32 ref half
  ;;
fp16)
  # fp16 with a loss scale that overflows at first (steps are skipped):
  # every rank of T = 2, 3, 4 and of 2 x 2 skips the steps one rank skips
  # (the inf/NaN check reads the group's summed squared norm), with
  # accumulate 2 too. As in tests/ranks/data_parallel.sh, a data-parallel rank
  # overflows on its own micro-batch, so the reference for 2
  # data-parallel groups accumulates 2 micro-batches of the groups' size.
  # The partial sums (the row split's forward, the column split's input
  # gradient) come out of their GEMMs in fp32, are all-reduced in fp32
  # and rounded once after (tp_reduce = fp32, passes/precision.c), so one
  # rank and a group differ in the order of fp32 sums only: losses and
  # final params within the 16-bit bound (near, tests/ranks/helpers.bash),
  # the skipped steps the same. tp_reduce = exact (f64 sums of the split
  # layers, on one rank too) gives one rank's bits at T = 3.
  build_tp
  ls="loss_scale=dynamic(scale=1e6, interval=4)"
  one ref "$tmp/tp" --batch 48 --precision fp16 --set "$ls"
  ranks 3 t3 "$tmp/tp" --batch 48 --tensor-parallel 3 --precision fp16 --set "$ls"
  near fp16 ref t3
  one acc2 "$tmp/tp" --batch 24 --accumulate 2 --precision fp16 --set "$ls"
  ranks 4 t2d2 "$tmp/tp" --batch 24 --tensor-parallel 2 --precision fp16 --set "$ls"
  near fp16 acc2 t2d2
  ranks 3 t3acc "$tmp/tp" --batch 24 --accumulate 2 --tensor-parallel 3 --precision fp16 --set "$ls"
  near fp16 acc2 t3acc
  ranks 4 t4 "$tmp/tp" --batch 48 --tensor-parallel 4 --precision fp16 --set "$ls"
  near fp16 ref t4
  one refx "$tmp/tp" --batch 48 --precision fp16 --set "$ls" --set tp_reduce=exact
  ranks 3 t3x "$tmp/tp" --batch 48 --tensor-parallel 3 --precision fp16 --set "$ls" --set tp_reduce=exact
  same refx t3x
  skipped=$(grep '"type": "train"' "$tmp/t3.json" | tail -1 | sed 's/.*"skipped": \([0-9]*\).*/\1/')
  [ "$skipped" -gt 0 ] || { echo "FAIL: the fp16 case skipped no step, so it tests nothing"; exit 1; }
  echo "ok: fp16 skipped $skipped steps on every rank, as one rank did"
  one bf16 "$tmp/tp" --batch 48 --precision bf16
  for t in 2 3 4; do
    ranks $t rbf16t$t "$tmp/tp" --batch 48 --tensor-parallel $t --precision bf16
    near bf16 bf16 rbf16t$t
  done
  one bf16acc "$tmp/tp" --batch 24 --accumulate 2 --precision bf16
  ranks 4 rbf16d2 "$tmp/tp" --batch 24 --tensor-parallel 2 --precision bf16
  near bf16 bf16acc rbf16d2
  # The control: one rank of half the batch is outside the bound.
  one bf16half "$tmp/tp" --batch 24 --precision bf16
  far bf16 bf16 bf16half
  echo "ok: bf16 at T = 2, 3, 4 and 2 x 2 (accumulate 2): within the bf16 bound of one rank"
  ;;
resume)
  # Saved at T = 4 on 4 ranks at step 10 (the pair padded to 100), resumed
  # at T = 2 on 2 ranks (no padding) and on one rank: steps 11-20 and the
  # final values as an uninterrupted 4-rank run's; and saved at T = 3
  # (padded to 99), resumed at T = 2 x 2.
  build_tp
  ranks 4 full "$tmp/tp" --batch 48 --tensor-parallel 4
  ranks 4 half "$tmp/tp" --batch 48 --tensor-parallel 4 --steps 10
  "${mpi[@]}" -np 2 "$tmp/tp" "${common[@]}" --batch 48 --tensor-parallel 2 --resume "$tmp/half.ckpt" \
    --metrics "$tmp/on2.json" --save "$tmp/on2.ckpt" > /dev/null
  near32 full on2
  "$tmp/tp" "${common[@]}" --batch 48 --resume "$tmp/half.ckpt" --metrics "$tmp/on1.json" --save "$tmp/on1.ckpt" > /dev/null
  near32 full on1
  ranks 3 half3 "$tmp/tp" --batch 48 --tensor-parallel 3 --steps 10
  "${mpi[@]}" -np 4 "$tmp/tp" "${common[@]}" --batch 24 --tensor-parallel 2 --resume "$tmp/half3.ckpt" \
    --metrics "$tmp/on22.json" --save "$tmp/on22.ckpt" > /dev/null
  near32 full on22
  ;;
cnn)
  # tests/ranks/tp_cnn.kl (examples/fashion_cnn.kl with a split dense head; T =
  # 3 pads its 128 units to 129) at T = 2 and 3 against one rank, at bf16
  # and fp16 too at T = 3; at T =
  # 2 x data parallel 2 batch norm normalises over each group's own rows
  # (as tests/ranks/data_parallel.sh cnn), so the reference accumulates 2 micro-batches
  # of the groups' size and the running statistics are left out.
  "$kiln" build tests/ranks/tp_cnn.kl -o "$tmp/cnn"
  one ref "$tmp/cnn" --batch 8
  ranks 2 t2 "$tmp/cnn" --batch 8 --tensor-parallel 2
  near32 ref t2
  ranks 3 t3 "$tmp/cnn" --batch 8 --tensor-parallel 3
  near32 ref t3
  one acc "$tmp/cnn" --batch 4 --accumulate 2
  ranks 4 t2d2 "$tmp/cnn" --batch 4 --tensor-parallel 2
  near32 acc t2d2 running_
  # bf16 and fp16 at T = 3 (padded): within the 16-bit bound of one rank
  # (near, tests/ranks/helpers.bash; the partial sums all-reduced in fp32)
  for p in bf16 fp16; do
    one ref$p "$tmp/cnn" --batch 8 --precision $p
    ranks 3 t3$p "$tmp/cnn" --batch 8 --tensor-parallel 3 --precision $p
    near $p ref$p t3$p
  done
  ;;
zero)
  # zero1 and zero2 on the data-parallel rest: T = 2 x 2 on 4 ranks (the
  # optimizer state of each group's slices partitioned over its 2
  # data-parallel ranks), with clip (the norm summed over both), with
  # accumulate 2; zero2 saved at 2 x 2 (the state gathered over both
  # groups, whole and unpadded) resumed on one rank and at T = 3 (padded).
  build_tp
  one ref "$tmp/tp" --batch 48
  one clip "$tmp/tp" --batch 48 --set clip=0.2
  one acc12 "$tmp/tp" --batch 12 --accumulate 4  # micro-batch 12 as the ranks' (see pad)
  for z in zero1 zero2; do
    ranks 4 $z "$tmp/tp" --batch 24 --tensor-parallel 2 --shard $z
    near32 ref $z
    ranks 4 ${z}clip "$tmp/tp" --batch 24 --tensor-parallel 2 --shard $z --set clip=0.2
    near32 clip ${z}clip
    ranks 4 ${z}acc "$tmp/tp" --batch 12 --accumulate 2 --tensor-parallel 2 --shard $z
    near32 acc12 ${z}acc
  done
  # Padded slices under ZeRO: T = 3 (99 units) x data parallel 2 on 6
  # ranks, zero2 with clip.
  ranks 6 t3z2 "$tmp/tp" --batch 24 --tensor-parallel 3 --shard zero2 --set clip=0.2
  near32 clip t3z2
  ranks 4 half "$tmp/tp" --batch 24 --tensor-parallel 2 --shard zero2 --steps 10
  "$tmp/tp" "${common[@]}" --batch 48 --resume "$tmp/half.ckpt" --metrics "$tmp/on1.json" --save "$tmp/on1.ckpt" > /dev/null
  near32 ref on1
  ranks 3 on3 "$tmp/tp" --batch 48 --tensor-parallel 3 --resume "$tmp/half.ckpt"
  near32 ref on3
  # and back: saved at T = 3 (padded), resumed at T = 2 x 2 with zero1.
  ranks 3 half3 "$tmp/tp" --batch 48 --tensor-parallel 3 --steps 10
  ranks 4 on4 "$tmp/tp" --batch 24 --tensor-parallel 2 --shard zero1 --resume "$tmp/half3.ckpt"
  near32 ref on4
  ;;
memory)
  # The memory per rank counts a rank's share: tp2_mlp has 50778
  # replicated params and a pair of 64 x 98 + 98 + 98 x 48 = 11074 split
  # ones; at T = 2, 5537 a rank, so Psi = 56315 and ZeRO partitions over
  # the N = 2 data-parallel ranks: zero1 (4 + 4 + 12 / 2) Psi and zero2
  # (4 + 16 / 2) Psi bytes, measured within 5% (printed: 1.0000). At T =
  # 3 the pair is padded to 11187 (3729 a rank). No MPI: kiln ir.
  for z in zero1 zero2; do
    "$kiln" ir "$model" --after shard --ranks 4 --set tensor_parallel=2 --set shard=$z > "$tmp/$z.txt"
    grep -q "^# tensor parallel: groups of 2 ranks x 2 data-parallel; params per rank 56315 = 0.225 MB (5537 split, 1/2 of 11074; 50778 replicated), one rank would hold 61852$" "$tmp/$z.txt" ||
      { echo "FAIL: $z: not the expected tensor-parallel line"; grep '^#' "$tmp/$z.txt"; exit 1; }
    line=$(grep "^# memory per rank (4 ranks, shard $z" "$tmp/$z.txt") || { echo "FAIL: $z: no memory line"; exit 1; }
    echo "$line" | grep -q "Psi = 56315 params on this rank of a tensor-parallel group of 2, N = 2 data-parallel ranks" ||
      { echo "FAIL: $z: the formulas do not count the rank's share over N = 2: $line"; exit 1; }
    ratio=$(echo "$line" | sed 's/.*measured \/ formula \([0-9.]*\).*/\1/')
    python3 -c "import sys; sys.exit(abs($ratio - 1) > 0.05)" || { echo "FAIL: $z: measured / formula $ratio"; exit 1; }
    echo "ok: $z at T = 2 x 2: measured / formula $ratio"
  done
  "$kiln" ir "$model" --after shard --ranks 3 --set tensor_parallel=3 > "$tmp/t3.txt"
  grep -q "params per rank 54507 = 0.218 MB (3729 split, 1/3 of 11187, 11074 padded to it; 50778 replicated), one rank would hold 61852$" "$tmp/t3.txt" ||
    { echo "FAIL: T = 3: not the expected padded line"; grep '^#' "$tmp/t3.txt"; exit 1; }
  grep -q '^  state %dense.3.w.tp_mask : f32\[33\] {init = ones, role = tp_mask, tp_axis = 0, tp_ranks = 3, tp_size = 98}' "$tmp/t3.txt" &&
    grep -q '^  param %dense.2.w : f32\[64,33\] .*tp_size = 98, tp_axis = 1, tp_ranks = 3' "$tmp/t3.txt" &&
    grep -q '= mul(%t[0-9]*, %dense.3.w.tp_mask)' "$tmp/t3.txt" ||
    { echo "FAIL: T = 3: the padded pair and its mask are not as expected"; cat "$tmp/t3.txt"; exit 1; }
  # The dump re-reads and reprints unchanged (tp_size, the mask).
  "$kiln" ir "$tmp/t3.txt" --after lower -o "$tmp/re.txt"
  cmp "$tmp/t3.txt" "$tmp/re.txt" || { echo "FAIL: the padded dump does not reprint unchanged"; diff "$tmp/t3.txt" "$tmp/re.txt" | head; exit 1; }
  # The norm and fp16's check read the group's sum (with zero2: after the
  # data-parallel sum of the slices').
  "$kiln" ir "$model" --after shard --ranks 4 --set tensor_parallel=2 --set shard=zero2 --set clip=1 --set precision=fp16 > "$tmp/n.txt"
  grep -q 'update %tp_grad_sqnorm[.0-9]* : f32\[\] = all_reduce(%zero2.grad_sqnorm) {reduce = sum, ranks = 2, group = tp}' "$tmp/n.txt" &&
    grep -q 'update %grads_finite : f32\[\] = isfinite(%tp_grad_sqnorm[.0-9]*)' "$tmp/n.txt" ||
    { echo "FAIL: the gradient norm is not summed over the group"; grep 'sqnorm\|finite' "$tmp/n.txt"; exit 1; }
  # zero3 with T > 1 is refused, naming both.
  if "$kiln" ir "$model" --after shard --ranks 4 --set tensor_parallel=2 --set shard=zero3 > /dev/null 2> "$tmp/z3.err"; then
    echo "FAIL: T = 2 with zero3 was accepted"; exit 1
  fi
  grep -q "zero3" "$tmp/z3.err" || { cat "$tmp/z3.err"; exit 1; }
  echo "ok: $(head -1 "$tmp/z3.err")"
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "tp_combined.$case_: ok"
