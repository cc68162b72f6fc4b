#!/usr/bin/env bash
# A checkpoint of one precision resumes in another:
#  - bf16 -> fp32: the fp32 run's checkpoint holds the bf16 run's params
#    and optimizer state unchanged (no .lowp copies);
#  - fp32 -> bf16: the copies are rebuilt (round to nearest even, checked
#    in Python), and a bf16 run resumed from that fp32 checkpoint ends with
#    the uninterrupted bf16 run's final checkpoint, byte for byte;
#  - fp32 -> fp16: the loss scaler starts afresh (its initial scale);
#  - a checkpoint that does not fit the model: the error names the
#    parameter and both shapes.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
check="python3 $testdir/ckpt/ckpt_check.py"
enter_tmpdir
build_example mlp
run() { ./mlp --threads 1 --quiet "$@" > /dev/null; }

run --precision bf16 --steps 20 --save b20.ckpt || bad "bf16 run"
$check lowp b20.ckpt || fail=1
# bf16 -> fp32 (at its last step: nothing trains, the values carry over).
run --steps 20 --resume b20.ckpt --save f20.ckpt || bad "fp32 resume of a bf16 checkpoint"
$check same b20.ckpt f20.ckpt && ok "bf16 -> fp32: params and optimizer state carried over" || fail=1
"$kiln" ckpt f20.ckpt | grep -q '^precision: fp32' && ! "$kiln" ckpt f20.ckpt | grep -q 'lowp' &&
  ok "the fp32 checkpoint has no low-precision copies" || bad "f20.ckpt: $("$kiln" ckpt f20.ckpt | head -3)"
# fp32 -> bf16: rebuilt copies, then training continues exactly.
run --precision bf16 --steps 20 --resume f20.ckpt --save rb20.ckpt || bad "bf16 resume of an fp32 checkpoint"
$check lowp rb20.ckpt && cmp -s rb20.ckpt b20.ckpt && ok "fp32 -> bf16: the copies rebuilt, the checkpoint as the bf16 run's" ||
  bad "the rebuilt bf16 checkpoint differs from the bf16 run's"
run --precision bf16 --steps 40 --log-every 1 --resume f20.ckpt --save res.ckpt --metrics res.json || bad "bf16 resume"
run --precision bf16 --steps 40 --log-every 1 --save whole.ckpt --metrics whole.json || bad "bf16 whole run"
grep '"type": "train"' whole.json | sed -n '21,$p' | grep -o '"loss": [^,]*' > a
grep '"type": "train"' res.json | grep -o '"loss": [^,]*' > b
[ "$(wc -l < b)" -eq 20 ] && cmp -s a b && cmp -s res.ckpt whole.ckpt &&
  ok "bf16 -> fp32 -> bf16 at step 20: the same losses for steps 21-40 and the same final checkpoint" ||
  { bad "the bf16 run resumed from fp32 differs"; diff a b | head -3; }
# fp32 -> fp16: the scaler starts at its initial scale.
run --steps 20 --save p20.ckpt || bad "fp32 run"
run --precision fp16 --steps 22 --log-every 1 --resume p20.ckpt --save h22.ckpt --metrics h.json || bad "fp16 resume"
scale=$(grep '"type": "train"' h.json | head -1 | grep -o '"loss_scale": [0-9]*')
[ "$scale" = '"loss_scale": 65536' ] && $check lowp h22.ckpt && ok "fp32 -> fp16: scale 65536 (the initial), f16 copies rebuilt" ||
  bad "fp32 -> fp16: $scale"
# fp16 -> fp32.
run --steps 22 --resume h22.ckpt --save f22.ckpt && $check same h22.ckpt f22.ckpt && ok "fp16 -> fp32" || bad "fp16 -> fp32"

# ---- a checkpoint that does not fit ----
sed 's/relu(dense(x, 256))/relu(dense(x, 200))/' "$testdir/../examples/mlp.kl" > mlp2.kl
"$kiln" build mlp2.kl -o mlp2 || exit 1
out=$(./mlp2 --threads 1 --quiet --steps 30 --resume p20.ckpt 2>&1); rc=$?
want="p20.ckpt: 'dense.1.w' is f32[784,256] in the checkpoint but f32[784,200] in the model; 'dense.1.b' is f32[256] in the checkpoint but f32[200] in the model; 'dense.2.w' is f32[256,128] in the checkpoint but f32[200,128] in the model"
[ $rc -eq 1 ] && grep -qF -- "$want" <<< "$out" && ok "a checkpoint of other shapes: $out" || { bad "other shapes: exit $rc"; echo "$out" | tail -2; }
exit $fail
