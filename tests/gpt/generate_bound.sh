#!/usr/bin/env bash
# --generate's length is bounded: --tokens above TRAIN_GEN_MAX_TOKENS
# (65536, driver/trainer.h; --help says so) is refused with an error
# naming the flag and the limit, exit 1, before any work (a count of a
# billion used to run for days); the limit itself runs and writes the
# prompt, exactly 65536 bytes and a newline.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
fail=0
mkdir -p "$tmp/text" "$tmp/m"
cp tests/gpt/*.kl "$tmp/text/"
"$kiln" pack --text "$tmp/text" -o "$tmp/m/data" > /dev/null || exit 1
cp tests/gpt/tiny_lm.kl "$tmp/m/tiny_lm.kl"
"$kiln" build "$tmp/m/tiny_lm.kl" -o "$tmp/lm" > /dev/null || exit 1
"$tmp/lm" --steps 1 --quiet --eval-every 0 --save "$tmp/c.ckpt" > /dev/null || exit 1
"$tmp/lm" --help | grep -qF -- "--tokens N         with --generate: bytes to draw (default 200, at most 65536)" &&
  echo "ok: --help names the limit" || { echo "FAIL: --help does not name the limit"; fail=1; }
for n in 65537 1000000000; do
  out=$(timeout 20 "$tmp/lm" --resume "$tmp/c.ckpt" --generate "def " --tokens $n 2>&1); rc=$?
  want="--tokens needs a count from 1 to 65536 (--generate's limit: one forward pass of the model per byte), got '$n'"
  if [ $rc -eq 1 ] && grep -qF -- "$want" <<< "$out"; then echo "ok: --tokens $n: $want"
  else echo "FAIL: --tokens $n: exit $rc, expected '$want'; got:"; tail -c 300 <<< "$out"; fail=1; fi
done
t0=$(date +%s.%N)
timeout 60 "$tmp/lm" --resume "$tmp/c.ckpt" --generate "def " --tokens 65536 --temperature 0 2> /dev/null > "$tmp/max.txt"; rc=$?
t1=$(date +%s.%N)
bytes=$(stat -c %s "$tmp/max.txt")
if [ $rc -eq 0 ] && [ "$bytes" -eq $((4 + 65536 + 1)) ]; then
  echo "ok: --tokens 65536 ran: $bytes bytes in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
else
  echo "FAIL: --tokens 65536: exit $rc, $bytes bytes (expected $((4 + 65536 + 1)))"; fail=1
fi
exit $fail
