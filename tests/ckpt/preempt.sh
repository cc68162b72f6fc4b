#!/usr/bin/env bash
# Preemption and --resume latest (docs/guides/checkpoints.md):
#  - a job preempted by SIGTERM at 5 random steps (the test hook
#    KILN_TEST_SIGNAL_AT raises it as that step begins; the handler is
#    the real one) exits 75 each time after saving --save, and the same
#    command resubmitted (--resume latest) ends with the uninterrupted
#    run's final checkpoint, byte for byte, and its losses;
#  - a SIGTERM sent from outside at a random moment (startup included:
#    then the default action, 143) is followed by the same command to the
#    same final checkpoint; SIGUSR1 stops a run as SIGTERM does;
#  - --resume latest with no checkpoint starts from scratch; it passes
#    over a damaged newest file to the next; it refuses a checkpoint of
#    another model or of another run length, with the reason;
#  - the flags' misuse is refused.
# tiny.kl: 256 synthetic samples in batches of 64, 4 steps an epoch; 40
# steps over 10 epochs, a checkpoint every 6 steps. Bit-exact: --threads 1.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
"$kiln" build "$testdir/train/tiny.kl" -o tiny > /dev/null 2>&1 || { echo "FAIL: kiln build tiny.kl"; exit 1; }
job() { ./tiny --threads 1 --quiet --epochs 10 --log-every 1 --save-every 6 --keep 2 --resume latest "$@"; }

# ---- the uninterrupted run ----
./tiny --threads 1 --quiet --epochs 10 --log-every 1 --save whole.ckpt --metrics whole.json > /dev/null ||
  bad "the uninterrupted run failed"
train_losses whole.json > whole.loss

# ---- preempted at 5 random steps, resubmitted unchanged ----
RANDOM=$$
steps=()
while [ ${#steps[@]} -lt 5 ]; do
  s=$((RANDOM % 39 + 1))
  [[ " ${steps[*]} " == *" $s "* ]] || steps+=("$s")
done
IFS=$'\n' steps=($(sort -n <<< "${steps[*]}")); unset IFS
echo "preempting at steps ${steps[*]}"
n=0
for s in "${steps[@]}"; do
  KILN_TEST_SIGNAL_AT=$s job --save p.ckpt --metrics p.json > out.txt 2>&1; rc=$?
  if [ $rc -eq 75 ] && grep -q "^preempted (SIGTERM) at step $s of 40: saved p.ckpt" out.txt &&
     [ "$("$kiln" ckpt p.ckpt | grep '^step:' | cut -d' ' -f2)" = "$s" ]; then
    n=$((n + 1))
  else
    bad "preempted at step $s: exit $rc"; cat out.txt
  fi
done
[ $n -eq 5 ] && ok "preempted at steps ${steps[*]}: exit 75 each time, p.ckpt saved at that step"
job --save p.ckpt --metrics p.json > out.txt 2>&1 || { bad "the last resubmission failed"; cat out.txt; }
cmp -s p.ckpt whole.ckpt && ok "resubmitted 5 times with --resume latest: the final checkpoint is the uninterrupted run's" ||
  bad "the final checkpoint after 5 preemptions differs from the uninterrupted run's"
# Each resumed run appends the steps after its checkpoint: the last loss
# of every step is the uninterrupted run's.
grep '"type": "train"' p.json | sed 's/.*"step": \([0-9]*\),.*"loss": \([^,]*\),.*/\1 \2/' |
  awk '{ last[$1] = $2 } END { for (s = 1; s <= 40; s++) print last[s] }' > p.loss
cmp -s p.loss whole.loss && ok "every step's loss is the uninterrupted run's" ||
  { bad "the losses differ"; diff p.loss whole.loss | head -4; }
ls -A | grep -q '^\.p\.ckpt\.[^k]' && bad "a temporary is left: $(ls -A | grep '^\.p')" ||
  ok "no temporary left beside p.ckpt"

# ---- a real signal from outside, at a random moment ----
# A longer run (600 steps, about half a second here) so that the signal
# lands while it trains, mostly.
long() { ./tiny --threads 1 --quiet --epochs 150 --save-every 6 --keep 2 "$@"; }
long --save long.ckpt > /dev/null || bad "the uninterrupted long run failed"
for sig in TERM USR1; do
  rm -f q.ckpt*
  # exec: $! is the executable's own pid, not a subshell's.
  exec_long() { exec ./tiny --threads 1 --quiet --epochs 150 --save-every 6 --keep 2 "$@"; }
  exec_long --resume latest --save q.ckpt > /dev/null 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 3 + 1))$((RANDOM % 10))"
  kill -$sig $pid 2> /dev/null
  wait $pid; rc=$?
  # 75: preempted at a step; 143 (138 for SIGUSR1): before training began
  # (the default action); 0: the run had ended.
  case $rc in 0|75|143|138) ;; *) bad "SIG$sig from outside: exit $rc" ;; esac
  at=$("$kiln" ckpt q.ckpt 2> /dev/null | grep '^step:' | cut -d' ' -f2)
  long --resume latest --save q.ckpt > /dev/null 2>&1 || bad "the resubmission after SIG$sig failed"
  cmp -s q.ckpt long.ckpt && ok "SIG$sig from outside (exit $rc, q.ckpt at step ${at:-none}), resubmitted: the uninterrupted run's final checkpoint" ||
    bad "after SIG$sig from outside (exit $rc): the final checkpoint differs"
done
rm -f u.ckpt*
KILN_TEST_SIGNAL_AT=5 ./tiny --threads 1 --quiet --epochs 10 --save u.ckpt > /dev/null 2>&1; rc=$?
[ $rc -eq 75 ] && ok "SIGTERM without --save-every: exit 75, u.ckpt at step $("$kiln" ckpt u.ckpt | grep '^step:' | cut -d' ' -f2)" ||
  bad "SIGTERM without --save-every: exit $rc"

# ---- 2 ranks, the signal on rank 1 alone: both stop at its step ----
# (Open MPI's MPMD form gives rank 1 alone the hook.) Every rank stops
# after the same step, rank 0 saves, and the resubmission ends with the
# uninterrupted 2-rank run's final checkpoint.
if command -v mpirun > /dev/null; then
  mpi=(timeout 120 mpirun --allow-run-as-root --oversubscribe)
  two=(./tiny --threads 1 --quiet --epochs 4)
  "${mpi[@]}" -np 2 "${two[@]}" --save r2w.ckpt > /dev/null 2>&1 || bad "the uninterrupted 2-rank run failed"
  "${mpi[@]}" -np 1 "${two[@]}" --save r2.ckpt --resume latest : -np 1 -x KILN_TEST_SIGNAL_AT=7 "${two[@]}" --save r2.ckpt \
    --resume latest > r2.out 2>&1; rc=$?
  at=$("$kiln" ckpt r2.ckpt 2> /dev/null | grep '^step:' | cut -d' ' -f2)
  grep -q "^preempted (a signal on another rank) at step 7 of 8" r2.out && [ "$at" = 7 ] &&
    ok "2 ranks, SIGTERM on rank 1: rank 0 stopped at step 7 too and saved it (mpirun exit $rc)" ||
    { bad "2 ranks, SIGTERM on rank 1: exit $rc, r2.ckpt at step '$at'"; tail -5 r2.out; }
  "${mpi[@]}" -np 2 "${two[@]}" --save r2.ckpt --resume latest > /dev/null 2>&1 || bad "the 2-rank resubmission failed"
  cmp -s r2.ckpt r2w.ckpt && ok "2 ranks resubmitted: the uninterrupted 2-rank run's final checkpoint" ||
    bad "2 ranks: the final checkpoint differs"
fi

# ---- --resume latest: none, damaged, another model or run ----
out=$(./tiny --threads 1 --epochs 1 --save fresh2.ckpt --resume latest 2>&1)
grep -qF -- "--resume latest: no checkpoint of fresh2.ckpt yet: starting from scratch" <<< "$out" &&
  ok "no checkpoint yet: starts from scratch" || bad "no checkpoint yet: $(head -3 <<< "$out")"
# A damaged newest file (step 36, cut short) is passed over for step 30.
rm -f d.ckpt*
KILN_TEST_SIGNAL_AT=37 job --save d.ckpt > /dev/null 2>&1
cp d.ckpt.step-36 x && head -c 1000 x > d.ckpt.step-36 && rm -f x d.ckpt
out=$(./tiny --threads 1 --epochs 10 --save-every 6 --save d.ckpt --resume latest 2>&1)
grep -qF "note: --resume latest passes over ./d.ckpt.step-36" <<< "$out" && grep -qF "resumed from ./d.ckpt.step-30 at step 30" <<< "$out" &&
  ok "a damaged step-36 file is passed over: resumed from step 30" || bad "damaged newest: $(grep -i 'resum\|note' <<< "$out")"
# d.ckpt (step 40) is now the newest.
expect_error "another run's length" "--resume latest: d.ckpt is of a run whose lr schedule spans 40 steps, this one 80" \
  ./tiny --threads 1 --quiet --epochs 20 --save d.ckpt --resume latest
# A checkpoint of another model under the same name.
sed 's/^model tiny/model other/' "$testdir/train/tiny.kl" > other.kl
"$kiln" build other.kl -o other > /dev/null 2>&1 || bad "kiln build other.kl"
expect_error "another model's series" "--resume latest: d.ckpt is a checkpoint of model 'tiny', not of this model 'other'" \
  ./other --threads 1 --quiet --epochs 10 --save d.ckpt --resume latest
expect_error "another precision" "--resume latest: d.ckpt was saved by a run in fp32, this run is bf16" \
  ./tiny --threads 1 --quiet --epochs 10 --save d.ckpt --resume latest --precision bf16

# ---- misuse ----
expect_error "--resume latest without --save" "--resume latest needs --save FILE" ./tiny --resume latest
expect_error "--resume latest with --init" "--resume latest continues a training run" \
  ./tiny --resume latest --save a.ckpt --init x.safetensors
exit $fail
