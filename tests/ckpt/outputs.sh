#!/usr/bin/env bash
# The files a training run writes, and the checkpoints it reads back:
#  - every output file is written whole or not at all, never through a
#    planted link, never over a FIFO (a character device is written straight), with a failed write an
#    error; an unwritable path fails before training; --metrics appends
#    when a run resumes; two runs saving to one path leave one whole file
#    (the second is refused: tests/ckpt/outputs_lock.sh);
#  - an fp16 run resumes exactly (the loss scaler's counters are in the
#    checkpoint);
#  - a run that keeps skipping fp16 steps stops (max_skipped_steps), and a
#    diverged run never saves non-finite values;
#  - a checkpoint with a valid checksum but crafted content is refused.
# Runs that are compared bit for bit pin --threads 1.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
craft="python3 $testdir/ckpt/ckpt_craft.py"
enter_tmpdir
build_example mlp
# expect NAME PATTERN ARGS...: the run exits 1 and prints PATTERN.
# (timeout: a crafted step once made the loader loop forever.)
expect() { expect_error "$1" "$2" timeout 600 ./mlp --steps 2 --quiet --threads 1 "${@:3}"; }

# ---- output files ----
echo precious > victim
ln -s victim lnk
expect "--metrics through a link" "lnk: is a symbolic link" --metrics lnk
expect "--trace through a link" "lnk: is a symbolic link" --trace lnk
expect "--save over a link" "lnk: is a symbolic link" --save lnk
[ "$(cat victim)" = precious ] && ok "the link's target is untouched" || bad "the link's target was written"
for cmd in "build" "ir"; do
  out=$("$kiln" $cmd "$testdir/../examples/mlp.kl" -o lnk 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -qF "lnk: is a symbolic link" <<< "$out" && ok "kiln $cmd -o refuses a link" ||
    { bad "kiln $cmd -o lnk: exit $rc"; echo "$out" | tail -2; }
done
# A link planted at the old fixed temporary name is never followed.
ln -s victim ck.tmp
./mlp --steps 2 --quiet --threads 1 --save ck > /dev/null 2>&1 || bad "--save ck failed"
[ "$(cat victim)" = precious ] && [ -f ck ] && [ ! -L ck ] && ok "a link planted at ck.tmp is not followed" ||
  bad "--save ck wrote through the link at ck.tmp"
rm -f ck.tmp
# A signal in the middle of a save removes the hidden temporary on the way
# out (the knob raises SIGTERM half way through the checkpoint of step 0:
# --save-init's, written before training, where no preemption handler
# is armed).
mkdir -p sig && rm -f sig/.k* sig/k
KILN_TEST_TERM_IN_SAVE=0 ./mlp --steps 2 --quiet --threads 1 --save-init sig/k > /dev/null 2>&1; rc=$?
left=$(ls -A sig)
[ $rc -eq 143 ] && [ -z "$left" ] && ok "SIGTERM during --save-init: killed (143), no temporary left" ||
  bad "SIGTERM during --save-init: exit $rc, left: $left"
# With --save, SIGTERM is a preemption (tests/ckpt/preempt.sh): one in
# the middle of the last step's save lets it finish; the run had no step
# left, so it ends as usual, with a whole checkpoint and no temporary.
rm -rf sig && mkdir sig
KILN_TEST_TERM_IN_SAVE=2 ./mlp --steps 2 --quiet --threads 1 --save sig/k > /dev/null 2>&1; rc=$?
left=$(ls -A sig)
[ $rc -eq 0 ] && [ "$left" = k ] && "$kiln" ckpt sig/k > /dev/null &&
  ok "SIGTERM during the last --save: the save finishes, exit 0, no temporary" ||
  bad "SIGTERM during the last --save: exit $rc, left: $left"
mkfifo fifo
expect "--save over a FIFO" "fifo: is a device, FIFO or socket" --save fifo
[ -p fifo ] && ok "the FIFO is still a FIFO" || bad "the FIFO was replaced"
expect "--metrics to /dev/full" "/dev/full: is a device" --metrics /dev/full
# A character device is written straight: the device's failed write is the error.
expect "--trace to /dev/full" "/dev/full: writing failed: No space left on device" --trace /dev/full
# A path that cannot be written fails before any training.
out=$(./mlp --steps 2 --threads 1 --save /nonexistent/dir/x 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -qF "/nonexistent/dir/x: cannot write --save here (/nonexistent/dir: No such file or directory)" <<< "$out" &&
   ! grep -q "eval" <<< "$out"; then
  ok "--save /nonexistent/dir/x fails before training"
else
  bad "--save /nonexistent/dir/x: exit $rc; got:"; echo "$out" | tail -3
fi
# A failed write (here: over the file size limit, as on a full disk) is an
# error naming the file, and the previous checkpoint stays whole.
./mlp --steps 2 --quiet --threads 1 --save full.ckpt > /dev/null 2>&1 || bad "--save full.ckpt failed"
cp full.ckpt before.ckpt
out=$( (trap '' XFSZ; ulimit -f 64; ./mlp --steps 3 --quiet --threads 1 --save full.ckpt) 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -qF "full.ckpt: writing failed: File too large" <<< "$out" && cmp -s full.ckpt before.ckpt &&
   [ -z "$(ls -A | grep '^\.full')" ]; then
  ok "a failed write: $(grep -F 'writing failed' <<< "$out"); the previous checkpoint is whole, no temporary left"
else
  bad "a failed write: exit $rc; got:"; echo "$out" | tail -3; ls -la
fi
# Two runs saving to one path at once: the second is refused before
# training (the lock, tests/ckpt/outputs_lock.sh), or they did not overlap;
# either way the file is one run's whole checkpoint (the runs are
# deterministic: compare with each).
common="--data synthetic:256 --batch 32 --steps 240 --threads 1 --quiet"
./mlp $common --seed 1 --save ref1 > /dev/null 2>&1 && ./mlp $common --seed 2 --save ref2 > /dev/null 2>&1 ||
  bad "the reference runs failed"
./mlp $common --seed 1 --save both > /dev/null 2> both1.err & p1=$!
./mlp $common --seed 2 --save both > /dev/null 2> both2.err & p2=$!
wait $p1; r1=$?; wait $p2; r2=$?
refused() { [ "$1" -eq 1 ] && grep -qF "both is being written by another kiln run" "$2"; }
if { [ $r1 -eq 0 ] && { [ $r2 -eq 0 ] || refused $r2 both2.err; } && cmp -s both ref1; } ||
  { [ $r2 -eq 0 ] && { [ $r1 -eq 0 ] || refused $r1 both1.err; } && cmp -s both ref2; }; then
  ok "two concurrent runs saving to one path (exits $r1 $r2) leave one whole checkpoint"
else
  bad "concurrent saves: exits $r1 $r2, the file is neither run's checkpoint"; cat both1.err both2.err | tail -3
fi
# --metrics appends when a run resumes: the history before the resume stays.
./mlp --steps 12 --threads 1 --log-every 1 --quiet --metrics full.json > /dev/null 2>&1
./mlp --steps 6 --threads 1 --log-every 1 --quiet --save half.ckpt --metrics part.json > /dev/null 2>&1
./mlp --steps 12 --threads 1 --log-every 1 --quiet --resume half.ckpt --metrics part.json > /dev/null 2>&1
grep '"type": "train"' full.json | grep -o '"step": [0-9]*, "loss": [^,]*' > a
grep '"type": "train"' part.json | grep -o '"step": [0-9]*, "loss": [^,]*' > b
[ "$(wc -l < b)" -eq 12 ] && cmp -s a b && ok "--metrics with --resume keeps steps 1-6 and appends 7-12" ||
  { bad "--metrics with --resume: the history differs from the uninterrupted run's"; diff a b | head -5; }

# ---- fp16: a resumed run continues exactly ----
# The scale grows every 7 clean steps, and step 10 is forced to overflow:
# the resumed run must carry the clean-step and skipped-step counters.
sed 's/^  seed      = 1/  seed      = 1\n  precision = fp16\n  loss_scale = dynamic(interval = 7)/' \
  "$testdir/../examples/mlp.kl" > fp16.kl
"$kiln" build fp16.kl -o fp16 || exit 1
f16="--threads 1 --log-every 1 --quiet --force-overflow 10"
./fp16 $f16 --steps 30 --save f_full.ckpt --metrics f_full.json > /dev/null 2>&1
./fp16 $f16 --steps 20 --save f_half.ckpt > /dev/null 2>&1
./fp16 $f16 --steps 30 --resume f_half.ckpt --save f_res.ckpt --metrics f_res.json > /dev/null 2>&1
scales() { grep '"type": "train"' "$1" | grep -o '"step": [0-9]*\|"loss": [^,]*\|"loss_scale": [^,]*\|"skipped": [0-9]*' | paste -d' ' - - - -; }
scales f_full.json | sed -n '21,30p' > a
scales f_res.json > b
if [ -s a ] && cmp -s a b && cmp -s f_full.ckpt f_res.ckpt; then
  ok "fp16 resumed at step 20: the same losses, loss scales and skipped counts for 21-30, the same final checkpoint"
else
  bad "the fp16 resumed run differs"; diff a b | head -6
fi

# A version 1 checkpoint (no scaler state) still loads, with its last scale.
$craft f_half.ckpt f_v1.ckpt v1
./fp16 $f16 --steps 21 --resume f_v1.ckpt --metrics f_v1.json > /dev/null 2>&1
[ "$(scales f_v1.json | cut -d' ' -f5-6)" = '"loss_scale": 131072' ] && ok "a version 1 checkpoint resumes with its loss scale" ||
  { bad "the version 1 checkpoint: $(scales f_v1.json)"; }

# ---- divergence ----
# With --lr 1e6 the first step's update makes the loss non-finite.
out=$(./mlp --precision fp16 --lr 1e6 --steps 200 --threads 1 --quiet 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -qF "training diverged" <<< "$out"; then
  ok "fp16 --lr 1e6 stops: $(grep -F 'diverged' <<< "$out")"
else
  bad "fp16 --lr 1e6: exit $rc; got:"; echo "$out" | tail -3
fi
# A static scale of 1e10 overflows every step: each is skipped.
sed 's/^  seed      = 1/  seed      = 1\n  precision = fp16\n  loss_scale = static(1e10)/' "$testdir/../examples/mlp.kl" > static.kl
"$kiln" build static.kl -o static || exit 1
out=$(./static --steps 40 --threads 1 --quiet 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -qF "step 33: the last 33 steps were all skipped" <<< "$out"; then
  ok "static(1e10) stops after max_skipped_steps (32) skipped steps in a row"
else
  bad "static(1e10): exit $rc; got:"; echo "$out" | tail -3
fi
# An initial dynamic scale of 1e30 halves 33 times and is still ~1e20: the
# advice names the loss scale, not --lr.
sed 's/^  seed      = 1/  seed      = 1\n  precision = fp16\n  loss_scale = dynamic(scale = 1e30)/' "$testdir/../examples/mlp.kl" > huge.kl
"$kiln" build huge.kl -o huge || exit 1
out=$(./huge --steps 40 --threads 1 --quiet 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -qF "is above fp16's largest value 65504: lower it (loss_scale" <<< "$out" && ! grep -qF -- "--lr" <<< "$out"; then
  ok "dynamic(scale = 1e30): the advice names the loss scale"
else
  bad "dynamic(scale = 1e30): exit $rc; got:"; echo "$out" | tail -3
fi
out=$(./static --steps 40 --threads 1 --quiet --set max_skipped_steps=0 2>&1); rc=$?
[ $rc -eq 0 ] && ok "max_skipped_steps=0 lets it run" || { bad "max_skipped_steps=0: exit $rc"; echo "$out" | tail -3; }
rm -f div.ckpt
out=$(./mlp --steps 16 --lr 1e6 --threads 1 --quiet --save div.ckpt 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -qF "div.ckpt: not saved: element" <<< "$out" && [ ! -e div.ckpt ]; then
  ok "a diverged run saves nothing: $(grep -F 'not saved' <<< "$out")"
else
  bad "--lr 1e6 --save: exit $rc, checkpoint $(ls div.ckpt 2>/dev/null); got:"; echo "$out" | tail -3
fi

# ---- crafted checkpoints with valid checksums ----
./mlp --steps 2 --threads 1 --quiet --save c.ckpt > /dev/null 2>&1 || bad "--save c.ckpt failed"
# Resuming at the run's last step trains nothing, and says so.
out=$(./mlp --steps 2 --threads 1 --quiet --resume c.ckpt 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qF "done: 2 steps (0 in this run) in" <<< "$out" && grep -qF "(0.00 ms/step, 0 samples/s" <<< "$out" &&
  ok "resumed at the last step: no steps run, 0 samples/s" || { bad "resumed at the last step: exit $rc"; echo "$out" | tail -2; }
$craft c.ckpt huge.ckpt step 9223372036854775808
expect "step 2^63" "huge.ckpt: the checkpoint is at step 9223372036854775808, beyond this run's 2 steps" --resume huge.ckpt
$craft c.ckpt far.ckpt step 1000000
expect "step beyond the run" "far.ckpt: the checkpoint is at step 1000000, beyond this run's 2 steps" --resume far.ckpt
$craft c.ckpt dup.ckpt dup dense.1.w dense.1.b
expect "a value twice, another missing" "dup.ckpt: 'dense.1.w' is in the checkpoint twice" --resume dup.ckpt
$craft c.ckpt short.ckpt bytes dense.1.w -4
expect "a wrong byte count" "short.ckpt: 'dense.1.w' (f32[784,256]) has 802812 bytes in the checkpoint; its type needs 802816" \
  --resume short.ckpt
$craft c.ckpt skip.ckpt skipped 99
expect "a skipped count beyond the step" "skip.ckpt: the loss-scaler state" --resume skip.ckpt
exit $fail
