#!/usr/bin/env bash
# Pipeline parallelism at training time (docs/guides/ranks.md, "Pipeline
# parallel"): P ranks, one stage each, against one rank with the same
# global batch (batch x accumulate, the micro-batches): the same losses
# and final params and optimizer state (tests/ranks/helpers.bash, same:
# fp32 within 1e-5; the stages run the same kernels on the same
# micro-batches in the same order, so the runs agree to the bit).
#
#   pipeline_train.sh KILN CASE   CASE: gpipe_mlp | 1f1b_mlp | train_refused
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/ranks/helpers.bash"

# pipe NP NAME EXE ARGS...: NP stages under mpirun, one rank each.
pipe() { local np=$1; shift; ranks "$np" "$@" --set pipeline_parallel="$np"; }

case $case_ in
gpipe_mlp)
  build mlp
  # 4 micro-batches of 16: the reference is one rank accumulating them.
  mb=(--batch 16 --accumulate 4)
  one ref "$tmp/mlp" "${mb[@]}"
  pipe 2 gp2 "$tmp/mlp" "${mb[@]}" --set pipeline_schedule=gpipe
  same ref gp2
  echo "ok: gpipe, 2 stages: the losses and final values of one rank"
  # The start-up lines: the stages, the transfers (the activation of each
  # cut forward and its gradient backward: 2 per cut) and each stage's
  # saved activations, held for all 4 micro-batches (gpipe).
  "${mpi[@]}" -np 2 "$tmp/mlp" "${loud[@]}" --steps 1 "${mb[@]}" --set pipeline_parallel=2 \
    --set pipeline_schedule=gpipe > "$tmp/start.txt"
  grep -q "^ranks: world 2 (mpirun (Open MPI)), 2 stages, data-parallel groups of 1" "$tmp/start.txt" &&
    grep -q "^pipeline: 2 stages (rank = stage), schedule gpipe, 4 micro-batches; transfers 2 per micro-batch, 0 after each update$" "$tmp/start.txt" &&
    grep -q "^pipeline: stage 0: saved activations .* x 4 in flight = " "$tmp/start.txt" &&
    grep -q "^pipeline: stage 1: saved activations .* x 4 in flight = " "$tmp/start.txt" ||
    { echo "FAIL: the start-up lines do not name the stages and their transfers"; grep -E "^(ranks|pipeline)" "$tmp/start.txt"; exit 1; }
  echo "ok: $(grep '^pipeline: 2 stages' "$tmp/start.txt")"
  # The control: half the global batch (accumulate 2) on one rank differs.
  one half "$tmp/mlp" --batch 16 --accumulate 2
  differ ref half
  echo "ok: the control (half the global batch) differs"
  ;;
1f1b_mlp)
  build mlp
  mb=(--batch 16 --accumulate 4)
  one ref "$tmp/mlp" "${mb[@]}"
  # 3 stages, one layer each (the most the mlp's cuts allow); 1f1b holds
  # 3, 2 and 1 micro-batches in flight on stages 0, 1 and 2.
  pipe 3 f3 "$tmp/mlp" "${mb[@]}" --set pipeline_schedule=1f1b
  same ref f3
  echo "ok: 1f1b, 3 stages: the losses and final values of one rank"
  # bf16: the same kernels on the same micro-batches: one rank's values.
  one bf "$tmp/mlp" "${mb[@]}" --precision bf16
  pipe 2 bf2 "$tmp/mlp" "${mb[@]}" --precision bf16
  same bf bf2
  echo "ok: 1f1b, 2 stages, bf16: the losses and final values of one rank"
  "${mpi[@]}" -np 3 "$tmp/mlp" "${loud[@]}" --steps 1 "${mb[@]}" --set pipeline_parallel=3 > "$tmp/start.txt"
  for s in "0: .* x 3 in flight" "1: .* x 2 in flight" "2: .* x 1 in flight"; do
    grep -q "^pipeline: stage $s = " "$tmp/start.txt" || { echo "FAIL: no line 'stage $s'"; grep "^pipeline" "$tmp/start.txt"; exit 1; }
  done
  echo "ok: 1f1b holds P - s micro-batches on stage s"
  ;;
train_refused)
  build mlp
  # What is not built is refused before any step, on every rank.
  refuse() {
    local want=$1 np=$2 rc=0; shift 2
    if [ "$np" -gt 1 ]; then
      "${mpi[@]}" -np "$np" "$tmp/mlp" "${common[@]}" --steps 1 "$@" > "$tmp/out.txt" 2> "$tmp/err.txt" || rc=$?
    else
      "$tmp/mlp" "${common[@]}" --steps 1 "$@" > "$tmp/out.txt" 2> "$tmp/err.txt" || rc=$?
    fi
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ! grep -q '"type": "train"' "$tmp/out.txt" ||
      { echo "FAIL: $*: exit $rc (0: trained; 124: hung)"; cat "$tmp/err.txt"; exit 1; }
    grep -qF -- "$want" "$tmp/err.txt" || { echo "FAIL: $*: the error does not say '$want'"; cat "$tmp/err.txt"; exit 1; }
    echo "ok: refused: $want"
  }
  refuse "pipeline_schedule = interleaved is not built (gpipe and 1f1b are)" 2 --set pipeline_parallel=2 --set pipeline_schedule=interleaved
  refuse "pipeline_schedule = zero_bubble is not built (gpipe and 1f1b are)" 2 --set pipeline_parallel=2 --set pipeline_schedule=zero_bubble
  refuse "pipeline_parallel = 2 runs one stage per rank on 2 ranks, but the world has 1" 1 --set pipeline_parallel=2
  refuse "pipeline_parallel = 2 runs one stage per rank on 2 ranks, but the world has 4 (pipeline x data parallel is not built)" 4 --batch 8 --set pipeline_parallel=2
  refuse "pipeline_parallel with precision = fp16" 2 --set pipeline_parallel=2 --precision fp16
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "pipeline.$case_: ok"
