#!/usr/bin/env bash
# Pipeline parallelism at training time (docs/guides/ranks.md, "Pipeline
# parallel"): P ranks, one stage each, against one rank with the same
# global batch (batch x accumulate, the micro-batches): the same losses
# and final params and optimizer state (tests/ranks/helpers.bash, same:
# fp32 within 1e-5; the stages run the same kernels on the same
# micro-batches in the same order, so the runs agree to the bit).
#
#   pipeline_train.sh KILN CASE   CASE: gpipe_mlp | 1f1b_mlp | cnn | gpt | gpt3 | dp | resume | fp16 | tp |
#                                     interleaved | kill | zero_bubble | zero_bubble_gpt | observe | zero | train_refused
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/ranks/helpers.bash"

# pipe NP NAME EXE ARGS...: NP stages under mpirun, one rank each.
pipe() { local np=$1; shift; ranks "$np" "$@" --set pipeline_parallel="$np"; }
# tiny_gpt_exe: examples/gpt.kl at the tiny size (tests/gpt/tiny.sh) in
# $tmp/m with its token files, built as $tmp/gpt.
tiny_gpt_exe() {
  source "$testdir/gpt/tiny.sh"
  tiny_gpt "$kiln" "$tmp" || exit 1
  "$kiln" build "$tmp/m/gpt.kl" -o "$tmp/gpt" > /dev/null
}

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
    grep -q "^pipeline: 2 stages (rank = stage), schedule gpipe, 4 micro-batches; transfers: 1 forward and 1 backward per micro-batch, 0 in the update and 0 after it$" "$tmp/start.txt" &&
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
  # Evaluation: the 3 stages each evaluate every third test batch (every
  # rank holds every param after the settle) and add their sums: one
  # rank's line, in a third of the batches each.
  "$tmp/mlp" "${loud[@]}" "${mb[@]}" --eval-every 10 > "$tmp/e1.txt"
  "${mpi[@]}" -np 3 "$tmp/mlp" "${loud[@]}" "${mb[@]}" --eval-every 10 --set pipeline_parallel=3 \
    --set pipeline_schedule=1f1b > "$tmp/e3.txt"
  e1=$(grep -o 'eval  loss [0-9.]*  accuracy [0-9.]*  ([0-9]* samples)' "$tmp/e1.txt")
  e3=$(grep -o 'eval  loss [0-9.]*  accuracy [0-9.]*  ([0-9]* samples)' "$tmp/e3.txt")
  [ -n "$e1" ] && [ "$e1" = "$e3" ] || { echo "FAIL: evaluation: one rank '$e1', 3 stages '$e3'"; exit 1; }
  echo "ok: evaluation on 3 stages as on one rank: $(echo "$e3" | tail -1)"
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
cnn)
  # examples/fashion_cnn.kl (batch norm: its running statistics are
  # updated by their stage and settled from there before the checkpoint).
  build fashion_cnn
  mb=(--batch 4 --accumulate 4)
  one ref "$tmp/fashion_cnn" "${mb[@]}"
  pipe 2 c2 "$tmp/fashion_cnn" "${mb[@]}" --set pipeline_schedule=gpipe
  same ref c2
  echo "ok: cnn, gpipe, 2 stages: the losses and final values of one rank"
  # With --profile (the same values): each stage's peak memory beside
  # the formula, its params and state plus 1f1b's P - s slots of saved
  # activations, (P - s) / m of gpipe's m.
  "${mpi[@]}" -np 4 "$tmp/fashion_cnn" "${loud[@]}" --metrics "$tmp/c4.json" --save "$tmp/c4.ckpt" "${mb[@]}" \
    --set pipeline_schedule=1f1b --set pipeline_parallel=4 --profile > "$tmp/c4.txt"
  same ref c4
  echo "ok: cnn, 1f1b, 4 stages: the losses and final values of one rank"
  grep -A4 "^pipeline memory (1f1b; " "$tmp/c4.txt" > "$tmp/c4.mem"
  for s in 0 1 2 3; do
    f=$(awk -v s=$s 'BEGIN { printf "%.3f", (4 - s) / 4 }')
    grep -q "^  stage $s: peak resident .*; saved activations $((4 - s)) x .* (gpipe's 4 x = .*: $f of it); its params and state .*; formula " "$tmp/c4.mem" ||
      { echo "FAIL: stage $s: no memory line with $((4 - s)) slots ($f of gpipe's)"; cat "$tmp/c4.mem"; exit 1; }
  done
  cat "$tmp/c4.mem"
  # Each rank's arena holds its own stage's buffers: each below the whole
  # plan's (one stage's activations of one micro-batch, not the model's),
  # and the memory lines give it.
  python3 - "$tmp/c4.txt" <<'PY' || { echo "FAIL: the ranks' arenas"; grep "^pipeline: rank" "$tmp/c4.txt"; exit 1; }
import re, sys
unit = {"bytes": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}
text = open(sys.argv[1]).read()
rows = re.findall(r"^pipeline: rank (\d): arena ([\d.]+) (\w+) \(its stages' buffers and transfers; "
                  r"the whole plan's ([\d.]+) (\w+)\)$", text, re.M)
assert [int(r[0]) for r in rows] == [0, 1, 2, 3], rows
for r, a, au, w, wu in rows:
    assert float(a) * unit[au] < 0.6 * float(w) * unit[wu], (r, a, au, w, wu)
    assert re.search(rf"^  stage {r}: peak resident .*; arena {a} {au}; ", text, re.M), r
print("ok: each rank's arena", ", ".join(f"{a} {au}" for _, a, au, _, _ in rows), "of the whole plan's", rows[0][3], rows[0][4])
PY
  # --memory-limit holds each rank to its own need: every stage's params
  # and state, its arena and the saved activations of its micro-batches
  # in flight (1f1b: stage 0 holds 4 of the 4). kiln plan predicts the
  # largest rank's need; the executable trains just above it and refuses
  # just below it, naming it, with a hint that fits.
  "$kiln" plan examples/fashion_cnn.kl --cluster "$here/plan/cpu4.cluster" --global-batch 16 --micro 4 --pipeline 4 \
    --tensor-parallel 1 --shard dp --precision fp32 --json > "$tmp/plan.json"
  need=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
l = next(l for l in d["layouts"] if l["P"] == 4 and l["schedule"] == "1f1b")
assert l["memory"] == l["persistent"] + l["arena"] + l["held"] and l["held"] > 0, l
print(l["memory"])' "$tmp/plan.json") || { echo "FAIL: kiln plan has no P = 4 1f1b layout with saved activations"; exit 1; }
  want=$(awk -v b="$need" 'BEGIN { printf "%.2f", b / 1e6 }')
  "${mpi[@]}" -np 4 "$tmp/fashion_cnn" "${common[@]}" "${mb[@]}" --steps 1 --memory-limit $((need + 50000)) \
    --set pipeline_parallel=4 2> "$tmp/lim.err" || { echo "FAIL: 4 stages refused at kiln plan's need + 50 kB"; cat "$tmp/lim.err"; exit 1; }
  if "${mpi[@]}" -np 4 "$tmp/fashion_cnn" "${common[@]}" "${mb[@]}" --steps 1 --memory-limit $((need - 10000)) \
    --set pipeline_parallel=4 2> "$tmp/lim.err"; then
    echo "FAIL: 4 stages trained at kiln plan's need - 10 kB"; exit 1
  fi
  grep -q "the training step needs $want MB (params and state [0-9.]* MB + arena [0-9.]* MB + the saved activations of the micro-batches in flight [0-9.]* MB" "$tmp/lim.err" ||
    { echo "FAIL: no clear error naming $want MB"; cat "$tmp/lim.err"; exit 1; }
  hint=$(grep -o -- "---> try --batch [0-9]* --accumulate [0-9]*" "$tmp/lim.err" | sed 's/^---> try //') ||
    { echo "FAIL: no hint"; cat "$tmp/lim.err"; exit 1; }
  # shellcheck disable=SC2086
  "${mpi[@]}" -np 4 "$tmp/fashion_cnn" "${common[@]}" $hint --steps 1 --memory-limit $((need - 10000)) \
    --set pipeline_parallel=4 2> "$tmp/hint.err" || { echo "FAIL: the hint ($hint) does not fit"; cat "$tmp/hint.err"; exit 1; }
  echo "ok: --memory-limit per stage: kiln plan's $need bytes trains, 10 kB less is refused ($(grep -m1 -o 'needs [0-9.]* MB' "$tmp/lim.err")), its hint $hint fits"
  ;;
gpt)
  # examples/gpt.kl at a tiny size (tests/gpt/tiny.sh: width 32, context
  # 16, its 4 blocks, clip = 1, the tied embedding): the cut activations
  # forward and their gradients backward, the head's gradient of the
  # embedding to stage 0 where its update runs, the updated embedding
  # back to the last stage, the clip's squared norms to stage 0 and its
  # scale from there.
  tiny_gpt_exe
  mb=(--batch 2 --accumulate 8)
  cd "$tmp/m"
  # Its token files, not --data synthetic.
  common=(--steps 20 --eval-every 0 --log-every 1 --quiet)
  loud=(--eval-every 0 --log-every 1)
  one ref "$tmp/gpt" "${mb[@]}"
  pipe 2 g2 "$tmp/gpt" "${mb[@]}" --set pipeline_schedule=gpipe
  same ref g2
  echo "ok: gpt, gpipe, 2 stages: the losses and final values of one rank"
  pipe 4 g4 "$tmp/gpt" "${mb[@]}" --set pipeline_schedule=1f1b
  same ref g4
  echo "ok: gpt, 1f1b, 4 stages: the losses and final values of one rank"
  "${mpi[@]}" -np 4 "$tmp/gpt" "${loud[@]}" --steps 1 "${mb[@]}" --set pipeline_parallel=4 > "$tmp/start.txt"
  grep -q "^pipeline: 4 stages (rank = stage), schedule 1f1b, 8 micro-batches; transfers: 3 forward and 7 backward per micro-batch, [0-9]* in the update and 1 after it$" "$tmp/start.txt" ||
    { echo "FAIL: the transfers are not the cuts', the embedding's and the clip's"; grep "^pipeline" "$tmp/start.txt"; exit 1; }
  echo "ok: $(grep '^pipeline: 4 stages' "$tmp/start.txt")"
  ;;
gpt3)
  tiny_gpt_exe
  mb=(--batch 2 --accumulate 8)
  cd "$tmp/m"
  # Its token files, not --data synthetic.
  common=(--steps 20 --eval-every 0 --log-every 1 --quiet)
  loud=(--eval-every 0 --log-every 1)
  one ref "$tmp/gpt" "${mb[@]}"
  pipe 3 g3 "$tmp/gpt" "${mb[@]}" --set pipeline_schedule=1f1b
  same ref g3
  echo "ok: gpt, 1f1b, 3 stages: the losses and final values of one rank"
  pipe 3 g3g "$tmp/gpt" "${mb[@]}" --set pipeline_schedule=gpipe
  same ref g3g
  echo "ok: gpt, gpipe, 3 stages: the losses and final values of one rank"
  ;;
dp)
  # P x D = 2 x 2 on 4 ranks: rank r is stage r mod 2 of replica r / 2;
  # each stage's 2 ranks sum their gradients (buckets of one stage's
  # values), against one rank with the same global batch.
  build mlp
  one ref "$tmp/mlp" --batch 16 --accumulate 4
  ranks 4 pd "$tmp/mlp" --batch 8 --accumulate 4 --set pipeline_parallel=2
  same ref pd
  echo "ok: mlp, 2 stages x 2 data-parallel: the losses and final values of one rank"
  # One micro-batch: the update reads backward's gradients themselves,
  # each stage's in buckets of its own (a bucket once took stage 0's
  # gradients into stage 1's: the losses differed from step 2).
  one ref1 "$tmp/mlp" --batch 16
  ranks 4 pd1 "$tmp/mlp" --batch 8 --set pipeline_parallel=2
  same ref1 pd1
  echo "ok: mlp, 2 stages x 2 data-parallel, one micro-batch: one rank's values"
  "${mpi[@]}" -np 4 "$tmp/mlp" "${loud[@]}" --steps 1 --batch 8 --accumulate 4 --set pipeline_parallel=2 > "$tmp/start.txt"
  grep -q "^ranks: world 4 (mpirun (Open MPI)), 2 stages, data-parallel groups of 2, shard dp" "$tmp/start.txt" &&
    grep -q "^effective batch 64 (batch 8 x accumulate 4 x ranks 2)" "$tmp/start.txt" ||
    { echo "FAIL: the start-up lines do not name 2 stages x 2 data-parallel"; grep -E "^(ranks|effective)" "$tmp/start.txt"; exit 1; }
  # The tiny GPT (clip over the summed gradients, the tied embedding):
  # the same values as data parallel alone on 2 ranks (whose sums are in
  # another order than one rank's: its losses within 1e-5 of one rank's).
  tiny_gpt_exe
  cd "$tmp/m"
  common=(--steps 20 --eval-every 0 --log-every 1 --quiet)
  one gref "$tmp/gpt" --batch 4 --accumulate 4
  ranks 2 gdp "$tmp/gpt" --batch 2 --accumulate 4
  ranks 4 gpd "$tmp/gpt" --batch 2 --accumulate 4 --set pipeline_parallel=2
  same gdp gpd
  compare losses "$tmp/gref.json" "$tmp/gpd.json" 1e-5 || { echo "FAIL: the losses of gref and gpd differ"; exit 1; }
  echo "ok: gpt, 2 stages x 2 data-parallel: data parallel's values, one rank's losses"
  ;;
zero)
  # ZeRO inside each stage's data-parallel group (P x D = 2 x 2, rank r
  # is stage r mod 2 of replica r / 2): a bucket holds one stage's
  # updates, the stage's 2 ranks partition its optimizer state (zero2:
  # and gradients; zero3: and params, gathered on the stage that reads
  # them); the checkpoint settles the stages, then gathers the slices.
  # Against one rank with the same global batch (fp32: the sums of 2
  # ranks in another order, within 1e-5).
  build mlp
  one ref "$tmp/mlp" --batch 16 --accumulate 4
  for sh in zero1 zero2 zero3; do
    ranks 4 "p$sh" "$tmp/mlp" --batch 8 --accumulate 4 --set pipeline_parallel=2 --shard "$sh"
    same ref "p$sh"
    echo "ok: mlp, 2 stages x 2 data-parallel, $sh: the losses, params and optimizer state of one rank"
  done
  ranks 6 p3z3 "$tmp/mlp" --batch 8 --accumulate 4 --set pipeline_parallel=3 --shard zero3
  same ref p3z3
  echo "ok: mlp, 3 stages x 2 data-parallel, zero3: one rank's values"
  ranks 4 pzb "$tmp/mlp" --batch 8 --accumulate 4 --set pipeline_parallel=2 --shard zero2 --set pipeline_schedule=zero_bubble
  same ref pzb
  echo "ok: zero2 with the zero_bubble schedule (the reduce-scatters in the weight-gradient passes): one rank's values"
  "${mpi[@]}" -np 4 "$tmp/mlp" "${loud[@]}" --steps 1 --batch 8 --accumulate 4 --set pipeline_parallel=2 \
    --shard zero2 > "$tmp/start.txt"
  grep -q "^ranks: world 4 (mpirun (Open MPI)), 2 stages, data-parallel groups of 2, shard zero2" "$tmp/start.txt" ||
    { echo "FAIL: the start-up line does not name 2 stages x 2 data-parallel, zero2"; grep "^ranks" "$tmp/start.txt"; exit 1; }
  # A checkpoint saved at P x D = 2 x 2 with zero2 (and zero3) is a whole
  # one: resumed on one rank, and at 2 x 2 with zero1, the steps 11-20 of
  # an uninterrupted run.
  "$tmp/mlp" "${common[@]}" --batch 16 --accumulate 4 --metrics "$tmp/full.json" > /dev/null
  "${mpi[@]}" -np 4 "$tmp/mlp" "${common[@]}" --steps 10 --batch 8 --accumulate 4 --set pipeline_parallel=2 \
    --shard zero2 --save "$tmp/half.ckpt" > /dev/null
  "$tmp/mlp" "${common[@]}" --batch 16 --accumulate 4 --resume "$tmp/half.ckpt" --metrics "$tmp/r1.json" > /dev/null
  compare losses "$tmp/full.json" "$tmp/r1.json" 1e-5 || { echo "FAIL: resumed on one rank: not the uninterrupted losses"; exit 1; }
  "${mpi[@]}" -np 4 "$tmp/mlp" "${common[@]}" --batch 8 --accumulate 4 --set pipeline_parallel=2 --shard zero1 \
    --resume "$tmp/half.ckpt" --metrics "$tmp/r2.json" > /dev/null
  compare losses "$tmp/full.json" "$tmp/r2.json" 1e-5 || { echo "FAIL: resumed at 2 x 2 zero1: not the uninterrupted losses"; exit 1; }
  "${mpi[@]}" -np 4 "$tmp/mlp" "${common[@]}" --steps 10 --batch 8 --accumulate 4 --set pipeline_parallel=2 \
    --shard zero3 --save "$tmp/half3.ckpt" > /dev/null
  "$tmp/mlp" "${common[@]}" --batch 16 --accumulate 4 --resume "$tmp/half3.ckpt" --metrics "$tmp/r3.json" > /dev/null
  compare losses "$tmp/full.json" "$tmp/r3.json" 1e-5 || { echo "FAIL: saved at 2 x 2 zero3: not the uninterrupted losses"; exit 1; }
  echo "ok: saved at 2 stages x 2 data-parallel zero2 and zero3, resumed on one rank and at 2 x 2 zero1: the uninterrupted losses"
  # fp16 from a scale that overflows (skipped steps): zero2 against data
  # parallel on the same layout (whether a step overflows depends on each
  # rank's micro-batch, so not against one rank).
  ls="loss_scale=dynamic(scale=1e6, interval=4)"
  ranks 4 f16dp "$tmp/mlp" --batch 8 --accumulate 4 --set pipeline_parallel=2 --precision fp16 --set "$ls"
  for sh in zero2 zero3; do
    ranks 4 "f16$sh" "$tmp/mlp" --batch 8 --accumulate 4 --set pipeline_parallel=2 --precision fp16 --set "$ls" --shard "$sh"
    near fp16 f16dp "f16$sh"
    grep '"type": "train"' "$tmp/f16$sh.json" | tail -1 | grep -q '"skipped": [1-9]' ||
      { echo "FAIL: the fp16 run skipped no step, so it tests nothing"; exit 1; }
    compare losses "$tmp/f16dp.json" "$tmp/f16$sh.json" 1e-5 > /dev/null ||
      { echo "FAIL: fp16 $sh on stages: the skipped steps or losses are not data parallel's"; exit 1; }
    echo "ok: fp16, 2 stages x 2 data-parallel, $sh: data parallel's losses and skipped steps"
  done
  # The CNN, interleaved (4 stages on 2 ranks a replica; batch norm's
  # statistics are each replica's own): zero1 against dp on the layout.
  build fashion_cnn
  mb=(--batch 4 --accumulate 4 --set pipeline_parallel=2 --set pipeline_schedule=interleaved)
  ranks 4 cdp "$tmp/fashion_cnn" "${mb[@]}"
  for sh in zero1 zero3; do
    ranks 4 "c$sh" "$tmp/fashion_cnn" "${mb[@]}" --shard "$sh"
    same cdp "c$sh"
    echo "ok: the CNN, interleaved, 2 stages x 2 data-parallel, $sh: data parallel's values"
  done
  # sync_batchnorm inside the stages: each batch norm's statistics summed
  # over its stage's 2 data-parallel ranks, as data parallel alone on 2
  # ranks sums them (the normalisation's kernel, fused with its
  # gradient's nodes, once ran in backward: the forward pass alone
  # normalised by garbage, loss 1.2e14 at step 1).
  mb=(--batch 4 --accumulate 4 --set sync_batchnorm=true)
  ranks 2 csdp "$tmp/fashion_cnn" "${mb[@]}"
  ranks 4 cspp "$tmp/fashion_cnn" "${mb[@]}" --set pipeline_parallel=2
  same csdp cspp
  ranks 2 csz "$tmp/fashion_cnn" "${mb[@]}" --shard zero2
  ranks 4 csz2 "$tmp/fashion_cnn" "${mb[@]}" --set pipeline_parallel=2 --shard zero2
  same csz csz2
  echo "ok: the CNN with sync_batchnorm, 2 stages x 2 data-parallel, dp and zero2: the values of the same run on 2 data-parallel ranks alone"
  # 3D: 2 stages x 2 tensor-parallel x 2 data-parallel, zero1 (8 ranks on
  # 2 cores: 6 steps), against one rank's first 6 steps.
  "$kiln" build tests/ranks/tp_mlp.kl -o "$tmp/tp"
  loud=(--data synthetic:600 --steps 6 --eval-every 0 --log-every 1)
  common=("${loud[@]}" --quiet)
  one ref6 "$tmp/tp" --batch 16 --accumulate 2
  ranks 8 p3z "$tmp/tp" --batch 8 --accumulate 2 --tensor-parallel 2 --set pipeline_parallel=2 --shard zero1
  same ref6 p3z
  echo "ok: 2 stages x 2 tensor-parallel x 2 data-parallel, zero1: one rank's values"
  # The tiny GPT (the tied embedding crosses the stages, clip sums every
  # stage's squared norms): the values of zero1 on 2 data-parallel ranks
  # alone (the params as one vector: Adam moves a bias element whose
  # gradient is near zero by a whole step either way).
  tiny_gpt_exe
  cd "$tmp/m"
  common=(--steps 20 --eval-every 0 --log-every 1 --quiet)
  ranks 2 gz "$tmp/gpt" --batch 2 --accumulate 4 --shard zero1
  for sh in zero1 zero2 zero3; do
    ranks 4 "gp$sh" "$tmp/gpt" --batch 2 --accumulate 4 --set pipeline_parallel=2 --shard "$sh"
    compare losses "$tmp/gz.json" "$tmp/gp$sh.json" 1e-5 || { echo "FAIL: gpt $sh on stages: the losses differ"; exit 1; }
    compare model "$tmp/gz.ckpt" "$tmp/gp$sh.ckpt" 1e-5 || { echo "FAIL: gpt $sh on stages: the params differ"; exit 1; }
  done
  echo "ok: gpt, 2 stages x 2 data-parallel, zero1, zero2 and zero3: zero1's values on 2 ranks"
  ;;
resume)
  # One checkpoint, gathered from the stages: saved at P = 4 at step 10
  # it is, byte for byte, one rank's; resumed at P = 2 and at P = 1 the
  # steps 11-20 are those of an uninterrupted run.
  tiny_gpt_exe
  cd "$tmp/m"
  common=(--eval-every 0 --log-every 1 --quiet --batch 2 --accumulate 4)
  "$tmp/gpt" "${common[@]}" --steps 20 --metrics "$tmp/full.json" > /dev/null
  "$tmp/gpt" "${common[@]}" --steps 10 --schedule-steps 20 --save "$tmp/one10.ckpt" > /dev/null
  "${mpi[@]}" -np 4 "$tmp/gpt" "${common[@]}" --steps 10 --schedule-steps 20 --set pipeline_parallel=4 \
    --save "$tmp/p4.ckpt" > /dev/null
  cmp "$tmp/one10.ckpt" "$tmp/p4.ckpt" || { echo "FAIL: the 4 stages' checkpoint is not one rank's"; exit 1; }
  echo "ok: saved at 4 stages: one rank's checkpoint, byte for byte"
  "${mpi[@]}" -np 2 "$tmp/gpt" "${common[@]}" --steps 20 --set pipeline_parallel=2 --resume "$tmp/p4.ckpt" \
    --metrics "$tmp/on2.json" > /dev/null
  "$tmp/gpt" "${common[@]}" --steps 20 --resume "$tmp/p4.ckpt" --metrics "$tmp/on1.json" > /dev/null
  for m in on2 on1; do
    compare losses "$tmp/full.json" "$tmp/$m.json" 1e-5 || { echo "FAIL: resumed $m differs from the uninterrupted run"; exit 1; }
  done
  echo "ok: saved at 4 stages, resumed at 2 and at 1: the uninterrupted run's losses"
  ;;
fp16)
  # precision = fp16 across the stages (dynamic loss scaling): the check
  # for inf/NaN sums every stage's squared gradients (transfers in the
  # update, to the stage that checks), its verdict reaches every stage, so
  # an overflow anywhere skips the step on every stage and each stage
  # backs off its scale alike: the same skipped steps and loss scales as
  # one rank with the same global batch. The stages run one rank's
  # kernels on its micro-batches in its order, so the values agree (near
  # fp16: 2 u sqrt(20) = 4.37e-3, tests/ranks/helpers.bash, the bound a
  # change of the fp32 sums' order would need; measured: see the lines).
  build mlp
  scales() {  # the loss scale of every step, A's against B's
    python3 - "$tmp/$1.json" "$tmp/$2.json" <<'PY' || { echo "FAIL: the loss scales of $1 and $2 differ"; exit 1; }
import json, sys
a, b = ([(r["step"], r["loss_scale"], r["skipped"]) for r in map(json.loads, open(f)) if r.get("type") == "train"] for f in sys.argv[1:])
assert a == b, f"(step, scale, skipped): {a} against {b}"
print(f"ok: {len(a)} steps' loss scales agree; last step {a[-1][0]}: scale {a[-1][1]}, skipped {a[-1][2]}")
PY
  }
  # A scale that overflows at first (1e6: f16's largest is 65504), and
  # grows every 4 clean steps.
  ls="loss_scale=dynamic(scale=1e6, interval=4)"
  mb=(--batch 16 --accumulate 4 --precision fp16 --set "$ls")
  one ref "$tmp/mlp" "${mb[@]}"
  pipe 2 f2 "$tmp/mlp" "${mb[@]}"
  near fp16 ref f2
  scales ref f2
  skipped=$(grep '"type": "train"' "$tmp/f2.json" | tail -1 | sed 's/.*"skipped": \([0-9]*\).*/\1/')
  [ "$skipped" -gt 0 ] || { echo "FAIL: the fp16 case skipped no step, so it tests nothing"; exit 1; }
  echo "ok: fp16, 1f1b, 2 stages: one rank's losses, its $skipped skipped steps and loss scales"
  # With clip, the updates read min(check, clip's scale) from the
  # checking stage, not the check itself: the stages learn the check from
  # the step's end alone.
  one refc "$tmp/mlp" "${mb[@]}" --set clip=1
  pipe 3 z3 "$tmp/mlp" "${mb[@]}" --set clip=1 --set pipeline_schedule=zero_bubble
  near fp16 refc z3
  scales refc z3
  echo "ok: fp16 with clip, zero_bubble, 3 stages: one rank's losses, skipped steps and loss scales"
  # An overflow on one stage alone (--force-overflow N:S makes one of
  # stage S's own gradients inf before step N's update): every stage
  # skips step N and halves its scale, as one rank does when its step N
  # overflows (--force-overflow N poisons its loss scale).
  mb=(--batch 16 --accumulate 4 --precision fp16 --set "loss_scale=dynamic(scale=1024, interval=1000)")
  one over "$tmp/mlp" "${mb[@]}" --force-overflow 5
  for s in 0 2; do
    pipe 3 over$s "$tmp/mlp" "${mb[@]}" --force-overflow 5:$s
    near fp16 over over$s
    scales over over$s
  done
  grep '"step": 5,' "$tmp/over0.json" | grep -q '"loss_scale": 512, "skipped": 1' ||
    { echo "FAIL: step 5 was not skipped with the scale halved"; grep '"step": 5,' "$tmp/over0.json"; exit 1; }
  echo "ok: fp16: an overflow on stage 0 alone, or on stage 2 alone, skips step 5 on every stage (one rank's values)"
  # The control: without the overflow the run differs (the step counts).
  one clean "$tmp/mlp" "${mb[@]}"
  differ over clean
  echo "ok: the control (no overflow) differs"
  ;;
tp)
  # Pipeline x tensor parallel (tests/ranks/tp_mlp.kl: a column/row pair
  # split over T ranks): rank r is tensor-parallel rank r mod T of stage
  # (r / T) mod P of data-parallel replica r / (T P) (tensor parallel
  # innermost, as Megatron). Each stage's T ranks split its layers (their
  # all_reduces over the stage's tensor-parallel group), each tp index has
  # its own pipeline of P stages (an activation crosses between ranks of
  # equal tp index, and so does the column split's input gradient, an
  # all_reduce's result); the checkpoint gathers the stages, then the
  # slices: one rank's values with the same global batch.
  "$kiln" build tests/ranks/tp_mlp.kl -o "$tmp/tp"
  one ref "$tmp/tp" --batch 16 --accumulate 4
  # pipe_tp NP NAME ARGS...: 2 stages x 2 tensor-parallel (x NP / 4 data-parallel).
  pipe_tp() { local np=$1 n=$2; shift 2; ranks "$np" "$n" "$tmp/tp" "$@" --tensor-parallel 2 --set pipeline_parallel=2; }
  pipe_tp 4 pt --batch 16 --accumulate 4
  same ref pt
  echo "ok: 2 stages x 2 tensor-parallel, 1f1b: the losses and final values of one rank"
  pipe_tp 4 ptz --batch 16 --accumulate 4 --set pipeline_schedule=zero_bubble
  same ref ptz
  echo "ok: 2 stages x 2 tensor-parallel, zero_bubble: one rank's values"
  # 3D: 2 stages x 2 tensor-parallel x 2 data-parallel on 8 ranks (2
  # cores: 6 steps), against one rank's first 6 steps.
  # The same run's start-up lines: the layout, each rank's stage,
  # tensor-parallel group and data-parallel group, in Megatron's order.
  loud=(--data synthetic:600 --steps 6 --eval-every 0 --log-every 1)
  common=("${loud[@]}" --quiet)
  one ref6 "$tmp/tp" --batch 16 --accumulate 2
  "${mpi[@]}" -np 8 "$tmp/tp" "${loud[@]}" --metrics "$tmp/p3d.json" --save "$tmp/p3d.ckpt" --batch 8 \
    --accumulate 2 --tensor-parallel 2 --set pipeline_parallel=2 > "$tmp/start.txt"
  same ref6 p3d
  echo "ok: 2 stages x 2 tensor-parallel x 2 data-parallel: one rank's values"
  grep -q "^ranks: world 8 (mpirun (Open MPI)), 2 stages, tensor-parallel groups of 2, data-parallel groups of 2" \
    "$tmp/start.txt" &&
    grep -q "^layout: world 8 = 2 stages x 2 tensor-parallel x 2 data-parallel" "$tmp/start.txt" ||
    { echo "FAIL: the start-up lines do not name the 3D layout"; grep -E "^(ranks|layout)" "$tmp/start.txt"; exit 1; }
  python3 - "$tmp/start.txt" <<'PY' || exit 1
import re, sys
T, P, D = 2, 2, 2
rows = [re.match(r"layout: rank (\d+): stage (\d+), tensor-parallel rank (\d+) of ranks (\d+)\.\.(\d+), "
                 r"data-parallel rank (\d+) of ranks (.*)$", l) for l in open(sys.argv[1]) if l.startswith("layout: rank ")]
assert len(rows) == 8 and all(rows), f"{len(rows)} rank lines"
for m in rows:
    r, s, t, lo, hi, d = map(int, m.groups()[:6])
    dp = [int(x) for x in m.group(7).split(",")]
    # Megatron's order, from each rank's own stage, tp and dp ranks.
    assert r == t + T * (s + P * d), f"rank {r}: stage {s} tp {t} dp {d}"
    assert (lo, hi) == (r - t, r - t + T - 1) and r in dp and len(dp) == D, m.group(0)
print("ok: the 8 ranks' stages and groups are tp + T (stage + P replica)")
PY
  grep "^layout: rank 5" "$tmp/start.txt"
  # fp16 in 3D from a scale that overflows: whether a step overflows
  # depends on each rank's micro-batch (8 rows), so the reference takes
  # the 2 replicas' 2 micro-batches as 4 of 8 rows (as ranks.precision).
  ls="loss_scale=dynamic(scale=1e6, interval=4)"
  one f8 "$tmp/tp" --batch 8 --accumulate 4 --precision fp16 --set "$ls"
  pipe_tp 8 f3d --batch 8 --accumulate 2 --precision fp16 --set "$ls"
  near fp16 f8 f3d
  grep '"type": "train"' "$tmp/f3d.json" | tail -1 | grep -q '"skipped": [1-9]' ||
    { echo "FAIL: the 3D fp16 run skipped no step, so it tests nothing"; exit 1; }
  echo "ok: fp16, 2 stages x 2 tensor-parallel x 2 data-parallel: one rank's losses and skipped steps"
  ;;
interleaved)
  # Megatron's interleaved 1F1B: 2 stages per rank (stage k on rank k mod
  # P), each rank's chunks taking the micro-batches in groups of P; every
  # stage runs its micro-batches in order, so the gradients sum as one
  # rank's. The CNN (batch norm's statistics settled from their stages)
  # at P = 2 (4 stages), and the tiny GPT (tied embedding: stage 0's
  # embedding to stage 3 and its head gradient back, rank 1 to rank 0;
  # clip: stage 2's squared norms to stage 0 stay on rank 0).
  build fashion_cnn
  mb=(--batch 4 --accumulate 4)
  one ref "$tmp/fashion_cnn" "${mb[@]}"
  "${mpi[@]}" -np 2 "$tmp/fashion_cnn" "${loud[@]}" --metrics "$tmp/c2.json" --save "$tmp/c2.ckpt" "${mb[@]}" \
    --set pipeline_parallel=2 --set pipeline_schedule=interleaved > "$tmp/start.txt"
  same ref c2
  echo "ok: cnn, interleaved, 2 ranks x 2 stages: the losses and final values of one rank"
  grep -q "^pipeline: 4 stages on 2 ranks (stage k on rank k mod 2), schedule interleaved, 4 micro-batches" "$tmp/start.txt" &&
    grep -q "^pipeline: stage 3 (rank 1): saved activations .* x [0-9]* in flight" "$tmp/start.txt" ||
    { echo "FAIL: the start-up lines do not name 4 stages on 2 ranks"; grep "^pipeline" "$tmp/start.txt"; exit 1; }
  grep "^pipeline" "$tmp/start.txt"
  # m = P: every forward first (Megatron's all-warm-up case).
  one ref2 "$tmp/fashion_cnn" --batch 4 --accumulate 2
  pipe 2 c2m2 "$tmp/fashion_cnn" --batch 4 --accumulate 2 --set pipeline_schedule=interleaved
  same ref2 c2m2
  echo "ok: cnn, interleaved, m = P = 2: one rank's values"
  tiny_gpt_exe
  cd "$tmp/m"
  common=(--steps 20 --eval-every 0 --log-every 1 --quiet)
  mb=(--batch 2 --accumulate 4)
  one gref "$tmp/gpt" "${mb[@]}"
  pipe 2 gi "$tmp/gpt" "${mb[@]}" --set pipeline_schedule=interleaved
  same gref gi
  echo "ok: gpt, interleaved, 2 ranks x 2 stages: the losses and final values of one rank"
  # pipeline_virtual_stages = 3: 6 stages on 2 ranks (chunks 0-2 each),
  # Megatron's warm-up of (P - s - 1) 2 + (v - 1) P passes.
  pipe 2 gi3 "$tmp/gpt" "${mb[@]}" --set pipeline_schedule=interleaved --set pipeline_virtual_stages=3
  same gref gi3
  "$kiln" ir "$tmp/m/gpt.kl" --after pipeline --ranks 2 --set pipeline_parallel=2 --set pipeline_schedule=interleaved \
    --set pipeline_virtual_stages=3 > "$tmp/ir3.txt"
  grep -q "^# pipeline: 6 stages, schedule interleaved, .*; 3 virtual stages per rank (stage k on rank k mod 2)" "$tmp/ir3.txt" ||
    { echo "FAIL: kiln ir does not name 6 stages, 3 a rank"; grep "^# pipeline" "$tmp/ir3.txt"; exit 1; }
  echo "ok: gpt, interleaved, 2 ranks x 3 stages: the losses and final values of one rank"
  # With data parallel, 2 x 2: each stage's 2 ranks sum its gradients
  # (in another order than one rank: the losses within 1e-5).
  ranks 4 gid "$tmp/gpt" --batch 1 --accumulate 4 --set pipeline_parallel=2 --set pipeline_schedule=interleaved
  compare losses "$tmp/gref.json" "$tmp/gid.json" 1e-5 || { echo "FAIL: the losses of gref and gid differ"; exit 1; }
  echo "ok: gpt, interleaved, 2 x 2 stages x 2 data-parallel: one rank's losses"
  ;;
kill)
  # A stage killed mid-run ends the job with an error within 30 s, never
  # a hang; a stage stopped (SIGSTOP) makes its neighbour's receive time
  # out after --comm-timeout seconds, naming the transfer.
  build mlp
  for how in KILL STOP; do
    rm -f "$tmp"/pid.* "$tmp/out.txt"
    (set +e; cd "$tmp" && timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
       sh -c 'echo $$ > pid.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' "$tmp/mlp" \
       --data synthetic:4000 --batch 8 --accumulate 2 --epochs 1000 --eval-every 0 --log-every 50 --comm-timeout 3 \
       --set pipeline_parallel=2 > out.txt 2> err.txt
     echo $? > rc) &
    job=$!
    # Signalled once 50 steps have run (the progress line's "50/250"), so
    # both stages are past the start-up collectives and in the schedule's
    # transfers (the start-up lines' "warmup 200 steps" is not a step).
    for _ in $(seq 300); do [ -s "$tmp/pid.1" ] && grep -q " 50/250 " "$tmp/out.txt" 2> /dev/null && break; sleep 0.1; done
    [ -s "$tmp/pid.1" ] || { echo "FAIL: stage 1 did not start"; exit 1; }
    victim=$(cat "$tmp/pid.1")
    kill -"$how" "$victim"
    t0=$(date +%s)
    wait "$job" || true
    took=$(($(date +%s) - t0))
    kill -KILL "$victim" 2> /dev/null || true
    rc=$(cat "$tmp/rc")
    echo "SIG$how: the job ended $took s after stage 1 was signalled, exit $rc"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: exit $rc (124: it hung until the timeout)"; tail -5 "$tmp/err.txt"; exit 1; }
    [ "$took" -le 30 ] || { echo "FAIL: took $took s (over 30)"; exit 1; }
    if [ "$how" = KILL ]; then
      grep -q "rank 1.*signal 9" "$tmp/err.txt" || { echo "FAIL: the error does not name rank 1 and the signal"; cat "$tmp/err.txt"; exit 1; }
    else
      grep -q "rank 0: recv of .* did not complete within 3 s (comm_timeout): rank 1 did not arrive" "$tmp/err.txt" ||
        { echo "FAIL: the error does not name the transfer and stage 1"; cat "$tmp/err.txt"; exit 1; }
      grep -m1 "did not complete" "$tmp/err.txt"
    fi
  done
  ;;
zero_bubble)
  # zero_bubble (ZB-H1): each stage's backward in an input-gradient pass
  # (what the previous stage needs) and a weight-gradient pass deferred
  # into the bubbles. The same kernels on the same micro-batches, the
  # weight gradients summed in micro-batch order: 1f1b's checkpoint byte
  # for byte, and one rank's values.
  build mlp
  mb=(--batch 16 --accumulate 4)
  one ref "$tmp/mlp" "${mb[@]}"
  pipe 3 zb3 "$tmp/mlp" "${mb[@]}" --set pipeline_schedule=zero_bubble
  pipe 3 f3 "$tmp/mlp" "${mb[@]}" --set pipeline_schedule=1f1b
  same ref zb3
  cmp "$tmp/f3.ckpt" "$tmp/zb3.ckpt" || { echo "FAIL: zero_bubble's checkpoint is not 1f1b's"; exit 1; }
  compare losses "$tmp/f3.json" "$tmp/zb3.json" 0 || { echo "FAIL: zero_bubble's losses are not 1f1b's to the bit"; exit 1; }
  echo "ok: zero_bubble, 3 stages: 1f1b's losses and checkpoint to the bit, one rank's values"
  # bf16 (the same kernels: one rank's values too), and accumulate 1
  # (the update reads the one micro-batch's gradients).
  one bf "$tmp/mlp" "${mb[@]}" --precision bf16
  pipe 2 zbb "$tmp/mlp" "${mb[@]}" --precision bf16 --set pipeline_schedule=zero_bubble
  same bf zbb
  echo "ok: zero_bubble, 2 stages, bf16: one rank's values"
  pipe 2 zb1 "$tmp/mlp" --batch 16 --set pipeline_schedule=zero_bubble
  pipe 2 f1 "$tmp/mlp" --batch 16
  cmp "$tmp/f1.ckpt" "$tmp/zb1.ckpt" || { echo "FAIL: accumulate 1: zero_bubble's checkpoint is not 1f1b's"; exit 1; }
  echo "ok: zero_bubble, one micro-batch: 1f1b's checkpoint"
  # P x D: 2 stages x 2 data-parallel (the stages' gradient all-reduces
  # after deferred weight gradients).
  ranks 4 zpd "$tmp/mlp" --batch 8 --accumulate 4 --set pipeline_parallel=2 --set pipeline_schedule=zero_bubble
  same ref zpd
  echo "ok: zero_bubble, 2 stages x 2 data-parallel: one rank's values"
  # The split is real: stage s defers at most s micro-batches' weight
  # gradients, stage 2's has weight-gradient steps of its own, stage 0's
  # backward needs nothing elsewhere and runs whole.
  "${mpi[@]}" -np 3 "$tmp/mlp" "${loud[@]}" --steps 1 "${mb[@]}" --set pipeline_parallel=3 \
    --set pipeline_schedule=zero_bubble > "$tmp/start.txt"
  grep -q "^pipeline: stage 0: zero_bubble: [1-9][0-9]* input-gradient and 0 weight-gradient steps; weight gradients of at most 0 micro-batches wait" "$tmp/start.txt" &&
    grep -q "^pipeline: stage 2: zero_bubble: [1-9][0-9]* input-gradient and [1-9][0-9]* weight-gradient steps; weight gradients of at most 2 micro-batches wait; their inputs .* x 3 = " "$tmp/start.txt" ||
    { echo "FAIL: the start-up lines do not show the split"; grep "^pipeline" "$tmp/start.txt"; exit 1; }
  echo "ok: $(grep '^pipeline: stage 2: zero_bubble' "$tmp/start.txt")"
  ;;
zero_bubble_gpt)
  # The tiny GPT at 4 stages: the tied embedding's gradient crossing to
  # stage 0 (its step runs in the input-gradient pass), the clip over the
  # stages' squared norms after the deferred weight gradients.
  tiny_gpt_exe
  mb=(--batch 2 --accumulate 8)
  cd "$tmp/m"
  common=(--steps 20 --eval-every 0 --log-every 1 --quiet)
  one ref "$tmp/gpt" "${mb[@]}"
  pipe 4 z4 "$tmp/gpt" "${mb[@]}" --set pipeline_schedule=zero_bubble
  pipe 4 f4 "$tmp/gpt" "${mb[@]}" --set pipeline_schedule=1f1b
  same ref z4
  cmp "$tmp/f4.ckpt" "$tmp/z4.ckpt" || { echo "FAIL: gpt: zero_bubble's checkpoint is not 1f1b's"; exit 1; }
  echo "ok: gpt, zero_bubble, 4 stages: 1f1b's checkpoint to the bit, one rank's values"
  ;;
observe)
  # --profile: each stage's measured bubble beside the schedule's
  # theoretical one; --trace: one track per stage with its forward,
  # input-gradient, weight-gradient and transfer spans, on rank 0's clock.
  build mlp
  for s in 1f1b zero_bubble; do
    "${mpi[@]}" -np 2 "$tmp/mlp" "${loud[@]}" --steps 4 --batch 16 --accumulate 8 --set pipeline_parallel=2 \
      --set pipeline_schedule=$s --profile --trace "$tmp/$s.trace.json" > "$tmp/$s.txt"
    grep -A3 "^pipeline bubble ($s, P = 2, m = 8" "$tmp/$s.txt" > "$tmp/$s.bubble" ||
      { echo "FAIL: $s: no bubble lines in --profile"; cat "$tmp/$s.txt"; exit 1; }
    grep -q "^  stage 1: bubble *[0-9.]*%, busy" "$tmp/$s.bubble" &&
      grep -q "^  measured [0-9.]*% (mean of the stages) against the theoretical" "$tmp/$s.bubble" ||
      { echo "FAIL: $s: the bubble lines"; cat "$tmp/$s.bubble"; exit 1; }
    cat "$tmp/$s.bubble"
    # Memory: 1f1b's slots on stage s are P - s of gpipe's m.
    grep -A2 "^pipeline memory ($s; " "$tmp/$s.txt" > "$tmp/$s.mem"
    grep -q "^  stage 0: peak resident .*; saved activations 2 x .* (gpipe's 8 x = .*: 0.250 of it); its params and state .* formula " "$tmp/$s.mem" &&
      grep -q "^  stage 1: peak resident .*; saved activations 1 x .* (gpipe's 8 x = .*: 0.125 of it);" "$tmp/$s.mem" ||
      { echo "FAIL: $s: the memory lines"; cat "$tmp/$s.mem"; exit 1; }
  done
  grep -q "weight-gradient inputs" "$tmp/zero_bubble.mem" || { echo "FAIL: zero_bubble's W slots are not in its memory"; exit 1; }
  grep -q "theoretical 11.1% ((P-1)/(m+P-1))" "$tmp/1f1b.bubble" &&
    grep -q "theoretical 4.0% (ZB-H1" "$tmp/zero_bubble.bubble" ||
    { echo "FAIL: the theoretical bubbles are not (P-1)/(m+P-1) = 1/9 and (P-1)/(3m+P-1) = 1/25"; exit 1; }
  python3 - "$tmp" <<'PY' || exit 1
import json, sys
tmp = sys.argv[1]
for s, kinds in (("1f1b", {"forward", "backward"}), ("zero_bubble", {"forward", "input gradient", "weight gradient"})):
    ev = json.load(open(f"{tmp}/{s}.trace.json"))
    names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M"}
    for st in (0, 1):
        tid = [t for t, n in names.items() if n == f"pipeline stage {st}"]
        assert tid, f"{s}: no track 'pipeline stage {st}' in {sorted(names.values())}"
        spans = [e for e in ev if e.get("tid") == tid[0] and e.get("ph") == "X"]
        cats = {e["cat"] for e in spans}
        want = set(kinds) | {"transfer"}
        if s == "zero_bubble" and st == 0:
            want = {"forward", "backward", "transfer"}  # stage 0's backward needs nothing elsewhere: whole
        assert want <= cats, f"{s}: stage {st}: spans {sorted(cats)}, want {sorted(want)}"
        # 4 steps x 8 micro-batches of each pass kind.
        for k in want - {"transfer"}:
            n = sum(e["cat"] == k for e in spans)
            assert n == 32, f"{s}: stage {st}: {n} {k} spans, not 4 x 8"
    # On one clock: stage 1's first receive ends after stage 0's first
    # send began (within 1 ms for the clocks' offset).
    t0, t1 = (next(t for t, n in names.items() if n == f"pipeline stage {st}") for st in (0, 1))
    send0 = min(e["ts"] for e in ev if e.get("tid") == t0 and e["name"].startswith("send "))
    recv1 = min(e["ts"] + e["dur"] for e in ev if e.get("tid") == t1 and e["name"].startswith("recv "))
    assert recv1 >= send0 - 1000, f"{s}: stage 1's first receive ends at {recv1} us, before stage 0's send at {send0}"
    print(f"ok: {s}: tracks {sorted(n for n in names.values() if n.startswith('pipeline'))}, {len(ev)} events")
PY
  echo "ok: the bubble in --profile, the stages' tracks in --trace"
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
  refuse "pipeline_schedule = interleaved needs the micro-batches (accumulate = 1) to be a multiple of pipeline_parallel = 2" 2 --set pipeline_parallel=2 --set pipeline_schedule=interleaved
  refuse "pipeline_parallel = 2 does not divide the world of 1 rank" 1 --set pipeline_parallel=2
  refuse "pipeline_parallel = 2 does not divide the world of 3 ranks" 3 --batch 8 --set pipeline_parallel=2
  refuse "--force-overflow 3:2 poisons a stage's gradients: it needs precision = fp16 and a stage below pipeline_parallel = 2" 2 --set pipeline_parallel=2 --precision fp16 --force-overflow 3:2
  ;;
*)
  echo "unknown case $case_"; exit 2 ;;
esac
echo "pipeline.$case_: ok"
