#!/usr/bin/env bash
# kiln build's temporary folder (generated C, CUBINs) is made in $TMPDIR
# and removed whatever the outcome, except when the compiler fails: then
# the error names the folder and it keeps the sources to look at. kiln
# run's temporary executable is removed however the run ends.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
model="$testdir/../examples/mlp.kl"
mkdir t
left() { find t -mindepth 1 | head -3; }
TMPDIR=$tmp/t "$kiln" build "$model" -o mlp > log 2>&1 && [ -x mlp ] && [ -z "$(left)" ] &&
  ok "a build leaves nothing in TMPDIR" || { bad "a build: exit $?, TMPDIR holds: $(left)"; tail -3 log; }
# -v prints the link's command, which names the folder's main.c.
out=$(TMPDIR=$tmp/t "$kiln" build "$model" -v -o /dev/full 2>&1); rc=$?
folder=$(grep -o "< [^ ]*/main.c" <<< "$out" | head -1 | sed 's/^< //; s,/main.c$,,')
[ $rc -eq 1 ] && [ -n "$folder" ] && [ ! -e "$folder" ] && [ -z "$(left)" ] &&
  ok "a failed write of the executable leaves nothing in TMPDIR" ||
  { bad "-o /dev/full: exit $rc, folder '$folder' left: $(ls "$folder" 2> /dev/null | tr '\n' ' ')"; echo "$out" | tail -2; }
rm -rf t/* t/.[!.]* 2> /dev/null
if "$kiln" doctor 2> /dev/null | grep -q '^  nvrtc .*sm_'; then
  out=$(TMPDIR=$tmp/t "$kiln" build "$model" --cuda-arch sm_1 -o cu 2>&1); rc=$?
  [ $rc -ne 0 ] && [ -z "$(left)" ] && ok "a refused --cuda-arch leaves nothing in TMPDIR" ||
    { bad "--cuda-arch sm_1: exit $rc, TMPDIR holds: $(left)"; echo "$out" | tail -2; }
  rm -rf t/* 2> /dev/null
else
  echo "skip: --cuda-arch case (no NVRTC in this build)"
fi
# A failing compiler: the folder stays, named in the error, with main.c.
out=$(KILN_CC=false TMPDIR=$tmp/t "$kiln" build "$model" -o bad 2>&1); rc=$?
kept=$(grep -o "the generated sources are in [^ ]*" <<< "$out" | awk '{print $NF}')
[ $rc -ne 0 ] && [ -n "$kept" ] && [ "${kept#"$tmp/t/kiln-build-"}" != "$kept" ] && [ -f "$kept/main.c" ] && [ ! -e bad ] &&
  ok "a failed compile keeps its sources in the folder the error names" ||
  { bad "KILN_CC=false: exit $rc, kept '$kept'"; echo "$out" | tail -3; }
rm -rf t/*
# kiln run: its temporary executable goes once the run ends, also when
# the run is stopped by SIGTERM (passed on to the executable).
TMPDIR=$tmp/t "$kiln" run "$model" --steps 2 --eval-every 0 --quiet > log 2>&1 && [ -z "$(left)" ] &&
  ok "kiln run leaves nothing in TMPDIR" || { bad "kiln run: TMPDIR holds: $(left)"; tail -3 log; }
TMPDIR=$tmp/t "$kiln" run "$model" --epochs 1000 > run.log 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "epoch 1/" run.log && break; sleep 0.1; done
kill -TERM $pid
wait $pid; rc=$?
[ $rc -ne 0 ] && [ -z "$(left)" ] && ! pgrep -f "$tmp/t/kiln-run" > /dev/null &&
  ok "kiln run stopped by SIGTERM: exit $rc, the executable stopped too and removed" ||
  { bad "kiln run after SIGTERM: exit $rc, TMPDIR holds: $(left)"; tail -3 run.log; }
exit $fail
