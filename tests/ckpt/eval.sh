#!/usr/bin/env bash
# --eval-only and --predict on the CNN:
#  - --eval-only --resume of the run's final checkpoint prints one line,
#    the run's final evaluation line (loss, accuracy, samples) exactly,
#    and its --metrics record has the run's loss and accuracy (%.6g);
#  - the same from a bf16 run (the copies rebuilt from the checkpoint);
#  - --predict writes a .npy of records (pred, label, logits) that numpy
#    reads: pred is the argmax of the logits, and its accuracy is the
#    evaluation's;
#  - misuse is refused before any work.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
pydeps=$2
pip_deps "$pydeps" "safetensors.numpy, numpy" safetensors numpy
check="python3 $testdir/ckpt/ckpt_check.py"
enter_tmpdir
build_example fashion_cnn cnn

for p in fp32 bf16; do
  ./cnn --threads 1 --precision $p --steps 12 --log-every 100 --save $p.ckpt --metrics $p.json > $p.out || bad "the $p run"
  final=$(grep ' eval  loss' $p.out | tail -1 | sed 's/.*\(eval  loss.*samples)\).*/\1/')
  ./cnn --threads 1 --precision $p --eval-only --resume $p.ckpt --metrics e$p.json --predict $p.npy > e$p.out 2> e$p.err ||
    { bad "--eval-only $p"; cat e$p.err; }
  if [ "$(wc -l < e$p.out)" -eq 1 ] && [ "$(cat e$p.out)" = "$final" ]; then
    ok "$p: --eval-only printed the run's final evaluation line: $final"
  else
    bad "$p: --eval-only printed '$(cat e$p.out)', the run's final line has '$final'"
  fi
  run_rec=$(grep '"type": "eval"' $p.json | tail -1 | grep -o '"loss": [^,]*, "accuracy": [^,}]*')
  eval_rec=$(grep '"type": "eval"' e$p.json | grep -o '"loss": [^,]*, "accuracy": [^,}]*')
  [ -n "$run_rec" ] && [ "$run_rec" = "$eval_rec" ] && ok "$p: the metrics record matches: $eval_rec" ||
    bad "$p: records '$run_rec' vs '$eval_rec'"
  acc=$(sed 's/.*"accuracy": //' <<< "$eval_rec")
  $check predict $p.npy "$acc" || fail=1
done

expect() { expect_error --not "^epoch\|params," "$1" "$2" ./cnn --threads 1 "${@:3}"; }
expect "--eval-only alone" "--eval-only needs the values to evaluate: --resume CKPT or --init FILE.safetensors" --eval-only
expect "--predict without --eval-only" "--predict needs --eval-only" --predict x.npy --resume fp32.ckpt
expect "--eval-only --save" "--eval-only trains nothing" --eval-only --resume fp32.ckpt --save y.ckpt
expect "--init and --resume" "--init and --resume both set the values: give one" --init a.safetensors --resume fp32.ckpt
expect "--init-partial alone" "--init-partial needs --init FILE.safetensors" --init-partial
expect "--predict to a missing folder" "/nonexistent/p.npy: cannot write --predict here" --eval-only --resume fp32.ckpt --predict /nonexistent/p.npy
exit $fail
