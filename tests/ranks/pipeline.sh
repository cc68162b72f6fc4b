#!/usr/bin/env bash
# Pipeline parallelism's stages (docs/guides/ranks.md, "Pipeline
# parallel"): the pipeline pass's cuts of the examples, what crosses each
# cut and the balance (kiln ir --after pipeline), explicit stage = k
# marks, and the refusals before any training. No MPI: the pass cuts for
# any world; training with pipeline_parallel > 1 is refused.
#
#   pipeline.sh KILN CASE   CASE: ir | marks | refused
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1 case_=$2
new_tmpdir

# stages FILE ARGS...: the "# pipeline:" lines of kiln ir --after pipeline.
stages() { local f=$1; shift; "$kiln" ir "$f" --after pipeline "$@" | grep '^# pipeline:'; }
# want NAME LINE TEXT: TEXT has LINE (a fixed string, whole line).
want() {
  if grep -qxF -- "$2" <<< "$3"; then ok "$1: $2"; else bad "$1: no line '$2' in:"; echo "$3"; fi
}

case $case_ in
ir)
  # GPT (examples/gpt.kl, 4 blocks of 945 MFLOP forward at batch 16): P = 4
  # cuts between the blocks, where only the residual stream [16, 128, 128]
  # crosses; the last stage also holds the head (1.08 GFLOP), so the
  # largest stage is 1.103 x the mean. The tied embedding is shared by
  # the first and last stages.
  out=$(stages examples/gpt.kl --set pipeline_parallel=4 --set accumulate=8 --ranks 8)
  want gpt4 "# pipeline: 4 stages, schedule 1f1b, 8 micro-batches (accumulate); world 8 = 4 stages x 1 tensor-parallel x 2 data-parallel" "$out"
  want gpt4 "# pipeline: stage 1: gpt.1.block.2.h .. t101, 945 MFLOP forward (24.1%), params 198272 (793.09 kB)" "$out"
  want gpt4 "# pipeline: cut 1|2: t101 [16, 128, 128] f32 1.05 MB (1 value, 1.05 MB per micro-batch each way)" "$out"
  want gpt4 "# pipeline: balance: the largest stage 1.103 x the mean; bubble of gpipe and 1f1b (P-1)/(m+P-1) = 0.273" "$out"
  want gpt4 "# pipeline: shared params: gpt.1.wte (stages 0 to 3)" "$out"
  # After autodiff and the optimizer (adamw: params x 3 with its two
  # moments), each stage's memory against the schedules' formula: the
  # saved activations (forward values backward reads) once per micro-batch
  # in flight, gpipe m = 8, 1f1b min(P - s, m): 4 on stage 0 (P / m = 1/2
  # of gpipe's), 1 on the last.
  out=$("$kiln" ir examples/gpt.kl --after optimizer --set pipeline_parallel=4 --set accumulate=8 | grep '^# pipeline:')
  want mem4 "# pipeline: memory stage 0: params and state 2.97 MB; saved activations 17.89 MB per micro-batch: gpipe 8 x = 143.13 MB, 1f1b 4 x = 71.57 MB" "$out"
  want mem4 "# pipeline: memory stage 3: params and state 2.38 MB; saved activations 18.04 MB per micro-batch: gpipe 8 x = 144.31 MB, 1f1b 1 x = 18.04 MB" "$out"
  # The FLOPs the cut balances are the plan's: the GPT's matmuls (it has
  # no convolution) sum to kiln counters' gemm_flops of one evaluation
  # batch (3355443200).
  gemm=$("$kiln" counters examples/gpt.kl | awk '$1 == "gemm_flops" { print $3 }')
  grep -q "^# pipeline: forward FLOPs [0-9]*, of them matmul and conv2d $gemm\$" <<< "$out" && [ "$gemm" = 3355443200 ] &&
    ok "matmul FLOPs = kiln counters' $gemm" || { bad "matmul FLOPs differ from kiln counters' '$gemm'"; grep FLOPs <<< "$out"; }
  # P = 2: two blocks each (1.89 and 2.02 GFLOP).
  out=$(stages examples/gpt.kl --set pipeline_parallel=2)
  want gpt2 "# pipeline: stage 0: t4 .. t101, 1.89 GFLOP forward (48.3%), params 445696 (1.78 MB)" "$out"
  want gpt2 "# pipeline: cut 0|1: t101 [16, 128, 128] f32 1.05 MB (1 value, 1.05 MB per micro-batch each way)" "$out"
  # MLP 784-256-128-10: the first layer is 85% of the FLOPs; P = 3 puts
  # one layer in each stage.
  out=$(stages examples/mlp.kl --set pipeline_parallel=3)
  want mlp3 "# pipeline: stage 0: t2 .. t13, 51.8 MFLOP forward (85.5%), params 200960 (803.84 kB)" "$out"
  want mlp3 "# pipeline: cut 0|1: t13 [128, 256] f32 131.07 kB (1 value, 131.07 kB per micro-batch each way)" "$out"
  want mlp3 "# pipeline: cut 1|2: t18 [128, 128] f32 65.54 kB (1 value, 65.54 kB per micro-batch each way)" "$out"
  # The CNN at P = 2, cut where one activation crosses.
  out=$(stages examples/fashion_cnn.kl --set pipeline_parallel=2)
  grep -q '^# pipeline: cut 0|1: .* (1 value, ' <<< "$out" && ok "cnn2: one value crosses" || { bad "cnn2"; echo "$out"; }
  # Each forward op carries its stage; the dump reprints unchanged, and
  # the stages are the same after every later pass (forward ops only;
  # the memory lines come with backward, and simplify folds a few
  # elementwise FLOPs).
  "$kiln" ir examples/gpt.kl --after pipeline --set pipeline_parallel=4 -o "$tmp/p.kir"
  "$kiln" ir "$tmp/p.kir" --after lower -o "$tmp/re.kir"
  cmp -s "$tmp/p.kir" "$tmp/re.kir" && ok "the dump reprints unchanged" || bad "the dump does not reprint unchanged"
  grep -q '= attention(.*_stage = 3}' "$tmp/p.kir" && ok "ops carry _stage" || bad "no op carries _stage = 3"
  diff <(grep '^# pipeline:' "$tmp/p.kir" | grep -v '^# pipeline: forward FLOPs') <("$kiln" ir examples/gpt.kl --set pipeline_parallel=4 | grep '^# pipeline:' | grep -v '^# pipeline: \(memory\|forward FLOPs\)') > /dev/null &&
    ok "the report after all passes is the pipeline pass's" || bad "the report changes after later passes"
  # P x T x D = 2 x 2 x 2 on 8 ranks (tests/ranks/tp_mlp.kl's split pair):
  # the data-parallel all-reduces are over 2 ranks (buckets of one
  # stage, _stage on their nodes), the tensor-parallel
  # groups' report names 2 data-parallel, and the dump reprints unchanged
  # (its world: the buckets' 2 x the group's 2 x the stages' 2).
  "$kiln" ir tests/ranks/tp_mlp.kl --set tensor_parallel=2 --set pipeline_parallel=2 --ranks 8 -o "$tmp/ptd.kir"
  out=$(cat "$tmp/ptd.kir")
  want ptd "# pipeline: 2 stages, schedule 1f1b, 1 micro-batch (accumulate); world 8 = 2 stages x 2 tensor-parallel x 2 data-parallel" "$out"
  grep -q '^# tensor parallel: groups of 2 ranks x 2 data-parallel;' <<< "$out" && grep -q '= all_reduce(%bucket.0) {reduce = sum, ranks = 2, _stage = 1}' <<< "$out" &&
    ok "ptd: all-reduces over the 2 data-parallel ranks" || bad "ptd: not 2 data-parallel ranks"
  "$kiln" ir "$tmp/ptd.kir" --after lower -o "$tmp/ptd2.kir"
  cmp -s "$tmp/ptd.kir" "$tmp/ptd2.kir" && ok "ptd: the dump reprints unchanged" || bad "ptd: the dump does not reprint unchanged"
  # bf16 with recompute = auto: the ops later passes add (casts, the
  # labels' reshape the schedule moves) are in their readers' stage, so
  # the cuts and the stages' params are those of the pipeline pass (the
  # casts add a few elementwise FLOPs).
  keep() { grep '^# pipeline: \(stage\|cut\|shared\)' | sed 's/^\(# pipeline: stage [0-9]*:\).*\(params .*\)/\1 \2/'; }
  diff <("$kiln" ir examples/gpt.kl --after pipeline --set pipeline_parallel=4 --set precision=bf16 | keep) \
       <("$kiln" ir examples/gpt.kl --set pipeline_parallel=4 --set precision=bf16 --set recompute=auto | keep) > /dev/null &&
    ok "bf16: the same stages and cuts after every pass" || bad "bf16: the stages or cuts change after later passes"
  # P = 1 changes nothing.
  "$kiln" ir examples/mlp.kl --after pipeline > "$tmp/one.kir"
  ! grep -q '_stage\|^# pipeline' "$tmp/one.kir" && ok "P = 1: no stages" || bad "P = 1 cut the graph"
  ;;
marks)
  # stage = k on calls: the marks are the stages (a call's ops inside
  # its def too; an unmarked op is in the stage of the op before it).
  sed -e 's/  x = relu(dense(x, 128))/  x = relu(dense(x, 128, stage = 1))/' \
      -e 's/  logits = dense(x, 10)/  logits = dense(x, 10, stage = 2)/' examples/mlp.kl > "$tmp/m.kl"
  out=$(stages "$tmp/m.kl" --set pipeline_parallel=3)
  want marks "# pipeline: cut 0|1: x.1 [128, 256] f32 131.07 kB (1 value, 131.07 kB per micro-batch each way)" "$out"
  want marks "# pipeline: stage 2: t22 .. t25, 329 kFLOP forward (0.5%), params 1290 (5.16 kB)" "$out"
  expect_error marks_over "m.kl:20:12: error: stage = 2, but pipeline_parallel = 2 (stages are 0 to 1)" \
    "$kiln" ir "$tmp/m.kl" --after pipeline --set pipeline_parallel=2
  expect_error marks_few "error: pipeline_parallel = 4, but the calls' stage = k marks make 3 stages" \
    "$kiln" ir "$tmp/m.kl" --after pipeline --set pipeline_parallel=4
  sed -e 's/  x = relu(dense(x, 128))/  x = relu(dense(x, 128, stage = 2))/' \
      -e 's/  logits = dense(x, 10)/  logits = dense(x, 10, stage = 1)/' examples/mlp.kl > "$tmp/back.kl"
  expect_error marks_back "back.kl:20:12: error: stage = 1 comes after ops of stage 2: stages follow the forward program in order" \
    "$kiln" ir "$tmp/back.kl" --after pipeline --set pipeline_parallel=3
  sed -e 's/  x = relu(dense(x, 128))/  x = relu(dense(x, 128, stage = 1.5))/' examples/mlp.kl > "$tmp/frac.kl"
  expect_error marks_word "frac.kl:19:34: error: stage must be a whole number from 0 to 4095" \
    "$kiln" ir "$tmp/frac.kl" --after lower
  ;;
refused)
  expect_error too_many "error: pipeline_parallel = 4, but model mlp can be cut into at most 3 stages with a layer (GEMM, convolution or attention) each where the fewest values (1) cross" \
    "$kiln" ir examples/mlp.kl --after pipeline --set pipeline_parallel=4
  # 2^32 + 2 is not read as 2 (clamped, then refused).
  expect_error huge "but model mlp can be cut into at most 3 stages" \
    "$kiln" ir examples/mlp.kl --after pipeline --set pipeline_parallel=4294967298
  expect_error world "error: pipeline_parallel = 2 x tensor_parallel = 1 does not divide the world of 3 ranks" \
    "$kiln" ir examples/mlp.kl --after pipeline --set pipeline_parallel=2 --ranks 3
  expect_error schedule_alone "examples/mlp.kl: error: pipeline_schedule = gpipe needs pipeline_parallel = 2 or more" \
    "$kiln" ir examples/mlp.kl --after pipeline --set pipeline_schedule=gpipe
  expect_error schedule_word "--set pipeline_schedule: error: pipeline_schedule must be gpipe, 1f1b, interleaved or zero_bubble" \
    "$kiln" ir examples/mlp.kl --set pipeline_schedule=pipedream
  expect_error zero "--set pipeline_parallel: error: pipeline_parallel must be an integer of at least 1" \
    "$kiln" ir examples/mlp.kl --set pipeline_parallel=0
  # interleaved cuts 2 stages per rank: 4 for P = 2, more than the mlp has.
  expect_error interleaved_cuts "error: pipeline_parallel = 2 with pipeline_schedule = interleaved (2 virtual stages per rank: 4 stages), but model mlp can be cut into at most 3 stages" \
    "$kiln" ir examples/mlp.kl --after pipeline --set pipeline_parallel=2 --set pipeline_schedule=interleaved
  # pipeline_virtual_stages: interleaved only, 2 to 8.
  expect_error virtual_alone "examples/mlp.kl: error: pipeline_virtual_stages = 3 applies to pipeline_schedule = interleaved with pipeline_parallel = 2 or more (this run: schedule 1f1b, pipeline_parallel = 2)" \
    "$kiln" ir examples/mlp.kl --after pipeline --set pipeline_parallel=2 --set pipeline_virtual_stages=3
  expect_error virtual_many "error: pipeline_virtual_stages is at most 8 (stages per pipeline rank)" \
    "$kiln" ir examples/gpt.kl --after pipeline --set pipeline_parallel=2 --set pipeline_schedule=interleaved --set pipeline_virtual_stages=9
  expect_error virtual_one "--set pipeline_virtual_stages: error: pipeline_virtual_stages must be an integer of at least 2" \
    "$kiln" ir examples/mlp.kl --set pipeline_virtual_stages=1
  expect_error virtual_cuts "error: pipeline_parallel = 2 with pipeline_schedule = interleaved (3 virtual stages per rank: 6 stages), but model fashion_cnn can be cut into at most 4 stages" \
    "$kiln" ir examples/fashion_cnn.kl --after pipeline --set pipeline_parallel=2 --set pipeline_schedule=interleaved --set pipeline_virtual_stages=3
  # What a schedule cannot run is refused before any step: interleaved's
  # micro-batches go in groups of P.
  "$kiln" build examples/mlp.kl -o "$tmp/mlp" > /dev/null 2>&1 || { bad "kiln build examples/mlp.kl"; exit 1; }
  expect_error --not '^step' train "pipeline_schedule = interleaved needs the micro-batches (accumulate = 3) to be a multiple of pipeline_parallel = 2" \
    "$tmp/mlp" --data synthetic --steps 1 --accumulate 3 --set pipeline_parallel=2 --set pipeline_schedule=interleaved
  ;;
*) echo "unknown case $case_"; exit 2 ;;
esac
exit $fail
