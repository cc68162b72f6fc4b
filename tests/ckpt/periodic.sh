#!/usr/bin/env bash
# Periodic checkpoints (--save-every, --keep) and the crash they survive:
#  - --save-every 50 --keep 2 over 300 steps leaves SAVE, SAVE.step-250
#    and SAVE.step-300, no temporary, and files of other names alone;
#    an earlier run's higher-numbered (or off-grid) files are not counted
#    nor removed;
#  - a process killed (SIGKILL, at a known point: KILN_TEST_KILL_IN_SAVE)
#    half way through writing step 150's checkpoint leaves steps 50 and
#    100 whole, and resuming step 100 ends with the uninterrupted run's
#    final checkpoint, byte for byte;
#  - the flags' misuse is refused before training.
# Bit-exact comparisons pin --threads 1.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
build_example mlp
run() { "$tmp/mlp" --threads 1 --quiet "$@"; }

# ---- --save-every 50 --keep 2 over 300 steps ----
mkdir a && cd a || exit 1
touch run.ckpt.step-abc run.ckpt.step-1.bak other.step-5
run --steps 300 --save-every 50 --keep 2 --save run.ckpt > /dev/null || bad "the run failed"
got=$(ls -A | tr '\n' ' ')
want="other.step-5 run.ckpt run.ckpt.step-1.bak run.ckpt.step-250 run.ckpt.step-300 run.ckpt.step-abc "
[ "$got" = "$want" ] && ok "--save-every 50 --keep 2 left: $got" || bad "left '$got', expected '$want'"
s250=$("$kiln" ckpt run.ckpt.step-250 | grep '^step:' | cut -d' ' -f2)
s300=$("$kiln" ckpt run.ckpt.step-300 | grep '^step:' | cut -d' ' -f2)
[ "$s250 $s300" = "250 300" ] && ok "kiln ckpt: they hold steps 250 and 300" || bad "they hold steps '$s250' '$s300'"
cmp -s run.ckpt run.ckpt.step-300 && ok "the final checkpoint equals the periodic one of step 300" ||
  bad "run.ckpt and run.ckpt.step-300 differ"
cd .. || exit 1
# Without --keep every one stays.
mkdir b && cd b || exit 1
run --steps 120 --save-every 40 --save r.ckpt > /dev/null || bad "the run without --keep failed"
got=$(ls -A | tr '\n' ' ')
[ "$got" = "r.ckpt r.ckpt.step-120 r.ckpt.step-40 r.ckpt.step-80 " ] && ok "without --keep: $got" || bad "without --keep: $got"
cd .. || exit 1
# An earlier run's higher-numbered files (steps 900 and 1000) are not this
# run's: --keep 2 keeps this run's newest two and leaves those alone.
mkdir c && cd c || exit 1
touch f.ckpt.step-900 f.ckpt.step-1000 f.ckpt.step-30
run --steps 120 --save-every 40 --keep 2 --save f.ckpt > /dev/null || bad "the run over a foreign series failed"
got=$(ls -A | tr '\n' ' ')
[ "$got" = "f.ckpt f.ckpt.step-1000 f.ckpt.step-120 f.ckpt.step-30 f.ckpt.step-80 f.ckpt.step-900 " ] &&
  ok "--keep 2 over an earlier run's steps 30, 900, 1000: $got" || bad "--keep 2 over a foreign series left: $got"
cd .. || exit 1

# ---- killed in the middle of a save ----
mkdir k && cd k || exit 1
KILN_TEST_KILL_IN_SAVE=150 "$tmp/mlp" --threads 1 --quiet --steps 300 --log-every 1 --save-every 50 --keep 2 --save k.ckpt \
  --metrics k.json > /dev/null 2>&1
rc=$?
[ $rc -eq 137 ] && ok "the run was killed (exit $rc) writing step 150's checkpoint" || bad "the killed run exited $rc"
ls -A
partial=$(ls -A | grep '^\.k\.ckpt\.step-150\.' | head -1)
if [ -n "$partial" ] && ! "$kiln" ckpt "$partial" > /dev/null 2>&1 && [ ! -e k.ckpt.step-150 ]; then
  ok "the half-written temporary $partial is no checkpoint, and k.ckpt.step-150 does not exist"
else
  bad "expected a partial temporary and no k.ckpt.step-150"
fi
"$kiln" ckpt k.ckpt.step-50 > /dev/null && "$kiln" ckpt k.ckpt.step-100 > /dev/null &&
  ok "k.ckpt.step-50 and k.ckpt.step-100 are whole" || bad "a previous checkpoint is damaged"
run --steps 300 --log-every 1 --resume k.ckpt.step-100 --save resumed.ckpt --metrics r.json > /dev/null || bad "resume failed"
run --steps 300 --log-every 1 --save whole.ckpt --metrics w.json > /dev/null || bad "the whole run failed"
grep '"type": "train"' w.json | sed -n '101,$p' | grep -o '"loss": [^,]*' > w.loss
grep '"type": "train"' r.json | grep -o '"loss": [^,]*' > r.loss
if cmp -s resumed.ckpt whole.ckpt && [ "$(wc -l < r.loss)" -eq 200 ] && cmp -s w.loss r.loss; then
  ok "resumed from step 100: the same losses for steps 101-300 and the same final checkpoint"
else
  bad "the run resumed after the kill differs from the uninterrupted one"; diff w.loss r.loss | head -3
fi
cd .. || exit 1

# ---- misuse ----
expect() { expect_error --not eval "$1" "$2" ./mlp --steps 2 --quiet --threads 1 "${@:3}"; }
expect "--save-every without --save" "--save-every needs --save FILE" --save-every 5
expect "--keep without --save-every" "--keep needs --save-every" --keep 2 --save x.ckpt
expect "--save-every 0" "--save-every needs a positive count, got '0'" --save-every 0 --save x.ckpt
expect "--keep abc" "--keep needs a positive count, got 'abc'" --keep abc
exit $fail
