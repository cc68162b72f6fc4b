#!/usr/bin/env bash
# A token file truncated by another process while a run trains on it:
# the run stops with an error naming the file and its sizes, exit 1 (it
# was SIGBUS, exit 135: the windows were read through a mapping whose
# pages the truncation removed; runtime/data/tokens.c reads them with pread).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
fail=0
mkdir -p "$tmp/text" "$tmp/m"
cp tests/gpt/*.sh tests/gpt/*.c tests/gpt/*.kl "$tmp/text/"
"$kiln" pack --text "$tmp/text" -o "$tmp/m/data" > /dev/null || exit 1
cp tests/gpt/tiny_lm.kl "$tmp/m/tiny_lm.kl"
"$kiln" build "$tmp/m/tiny_lm.kl" -o "$tmp/lm" > /dev/null || exit 1
cd "$tmp"
size=$(stat -c %s m/data/train.tok)
"$tmp/lm" --log-every 1 --epochs 100000 --steps 1000000 > run.out 2> run.err &
pid=$!
# Truncate once the run has taken a step (it reads windows all along).
for _ in $(seq 200); do grep -qE "step +[0-9]+/[0-9]+ +loss" run.out 2> /dev/null && break; sleep 0.1; done
truncate -s 0 m/data/train.tok
# The run ends on its own; the timeout only guards the test.
for _ in $(seq 300); do kill -0 $pid 2> /dev/null || break; sleep 0.1; done
kill -0 $pid 2> /dev/null && { kill $pid; echo "FAIL: the run did not stop after the truncation"; fail=1; }
wait $pid
rc=$?
want="m/data/train.tok: the token file changed while the run reads it: it now holds 0 bytes, it held $size when opened"
if [ $rc -eq 1 ] && grep -qF "$want" run.err; then
  echo "ok: truncated while training: exit 1: $(grep -F "$want" run.err | head -1)"
else
  echo "FAIL: exit $rc, expected 1 and '$want'; stderr:"; tail -3 run.err; fail=1
fi
exit $fail
