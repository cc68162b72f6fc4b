# The cases ZeRO stages 2 and 3 share (tests/ranks/zero/zero2.sh, zero3.sh),
# sourced after ranks_helpers.bash with
#   z           the stage: zero2 | zero3 (shard_args=(--shard $z) is set here)
#   z_what      what the start-up line says it partitions
#   cnn_ranks   the rank counts of the cnn case
# zero_stage_case CASE runs CASE: mlp | cnn | precision | resume (called
# as a command of its own, not in a condition, so that set -e holds).
#
# Each compares 20 steps' losses and the final params and optimizer state
# (rtol 1e-5; bf16/fp16 within their bound) with one rank of the same
# global batch (ranks_helpers.bash).
# The mlp's dense.3.b (10 elements) and dense.1.b (256) divide by neither
# 3 nor 4, nor its 235146 params by 4: slices are padded.
shard_args=(--shard "$z")

zero_stage_case() {
  case $1 in
  mlp)
    build mlp
    one ref "$tmp/mlp" --batch 48
    for np in 2 3 4; do
      ranks "$np" z$np "$tmp/mlp" --batch $((48 / np))
      same ref z$np
    done
    # One bucket per param (bucket = 0): a collective per param, padded
    # slices of dense.3.b and dense.1.b on 3 ranks.
    ranks 3 b0 "$tmp/mlp" --batch 16 --bucket 0
    same ref b0
    # accumulate 2: each micro-batch's slice summed into this rank's slice
    # of the accumulator; with clipping by the global norm (clip = 0.05
    # clips: the control below).
    one acc "$tmp/mlp" --batch 24 --accumulate 2 --set clip=0.05
    one accnoclip "$tmp/mlp" --batch 24 --accumulate 2
    differ acc accnoclip
    ranks 3 zacc "$tmp/mlp" --batch 8 --accumulate 2 --set clip=0.05
    same acc zacc
    # The control: KILN_MPI=0 makes each process a run of its own.
    solo 2 ctl "$tmp/mlp" --batch 24
    differ ref ctl
    # The start-up lines name the mode and the memory per rank.
    "${mpi[@]}" -np 2 "$tmp/mlp" --data synthetic:600 --steps 1 --eval-every 0 --shard "$z" > "$tmp/out.txt"
    grep -q "^ranks: world 2 (mpirun (Open MPI)), shard $z" "$tmp/out.txt" &&
      grep -q "^memory per rank (2 ranks, shard $z, $z_what)" "$tmp/out.txt" ||
      { echo "FAIL: the start-up lines do not say $z"; grep -E "^(ranks|memory)" "$tmp/out.txt"; exit 1; }
    ;;
  cnn)
    # Batch norm per rank (tests/ranks/data_parallel.sh, cnn): the reference accumulates
    # N micro-batches of the ranks' size; running statistics left out.
    build fashion_cnn
    for np in $cnn_ranks; do
      one ref$np "$tmp/fashion_cnn" --batch 4 --accumulate "$np"
      ranks "$np" z$np "$tmp/fashion_cnn" --batch 4
      same ref$np z$np running_
    done
    ;;
  precision)
    # bf16 on 4 ranks, fp16 on 3 with a loss scale that overflows at first:
    # every rank skips the steps one rank skips. Within the 16-bit bound
    # (near, tests/ranks/helpers.bash: the ranks sum in another order, and
    # a value at a 16-bit rounding boundary may round the other way).
    build mlp
    one bf16 "$tmp/mlp" --batch 24 --precision bf16
    ranks 4 zbf16 "$tmp/mlp" --batch 6 --precision bf16
    near bf16 bf16 zbf16
    # bf16 with accumulate 2: each micro-batch's gradient reduce-scattered
    # into the fp32 accumulator's slice.
    one bf16acc "$tmp/mlp" --batch 12 --accumulate 2 --precision bf16
    ranks 4 zbf16acc "$tmp/mlp" --batch 3 --accumulate 2 --precision bf16
    near bf16 bf16acc zbf16acc
    ls="loss_scale=dynamic(scale=1e6, interval=4)"
    one fp16 "$tmp/mlp" --batch 8 --accumulate 3 --precision fp16 --set "$ls"
    ranks 3 zfp16 "$tmp/mlp" --batch 8 --precision fp16 --set "$ls"
    near fp16 fp16 zfp16
    # The control: one rank of half the batch is outside the bound.
    one bf16b "$tmp/mlp" --batch 12 --precision bf16
    far bf16 bf16 bf16b
    skipped=$(grep '"type": "train"' "$tmp/zfp16.json" | tail -1 | sed 's/.*"skipped": \([0-9]*\).*/\1/')
    [ "$skipped" -gt 0 ] || { echo "FAIL: the fp16 case skipped no step, so it tests nothing"; exit 1; }
    echo "ok: $z fp16 skipped $skipped steps on every rank, as one rank did"
    ;;
  resume)
    # Saved on 4 ranks at step 10 with accumulate 2 (the file holds the
    # usual full state, accumulators included), resumed on 2 (the same
    # stage) and on 1 (dp): steps 11-20 as in an uninterrupted 4-rank run.
    build mlp
    ranks 4 full "$tmp/mlp" --batch 6 --accumulate 2
    ranks 4 half "$tmp/mlp" --batch 6 --accumulate 2 --steps 10
    "${mpi[@]}" -np 2 "$tmp/mlp" "${common[@]}" --shard "$z" --batch 12 --accumulate 2 --resume "$tmp/half.ckpt" \
      --metrics "$tmp/on2.json" > /dev/null
    "$tmp/mlp" "${common[@]}" --batch 24 --accumulate 2 --resume "$tmp/half.ckpt" --metrics "$tmp/on1.json" > /dev/null
    for m in on2 on1; do
      compare losses "$tmp/full.json" "$tmp/$m.json" 1e-5 || { echo "FAIL: resumed $m differs from the 4-rank run"; exit 1; }
    done
    # The checkpoint names what one rank's does.
    one onehalf "$tmp/mlp" --batch 24 --accumulate 2 --steps 10
    diff <("$kiln" ckpt "$tmp/onehalf.ckpt" | sed -n '/^  name/,$p' | awk '{print $1, $2, $3, $4}' | sort) \
         <("$kiln" ckpt "$tmp/half.ckpt" | sed -n '/^  name/,$p' | awk '{print $1, $2, $3, $4}' | sort) ||
      { echo "FAIL: the 4-rank $z checkpoint does not hold one rank's values"; exit 1; }
    ;;
  *)
    echo "zero_stage_case: no case $1"; exit 2 ;;
  esac
}
