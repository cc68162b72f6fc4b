#!/usr/bin/env bash
# --progress: on a terminal one live line per epoch, redrawn in place
# with \r (the bar, steps, samples/s, loss, ETA, memory); redirected the
# plain periodic lines only, never both. The terminal is a pseudo-
# terminal of script(1) (util-linux), 160 columns wide so that no field
# is cut. tiny.kl: 256 samples in batches of 64, 4 steps an epoch.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
command -v script > /dev/null || { echo "SKIP: no script(1) (util-linux)"; exit 0; }
"$kiln" build "$testdir/train/tiny.kl" -o "$tmp/tiny" > /dev/null 2>&1 || { echo "FAIL: kiln build tiny.kl"; exit 1; }
# CI would turn auto's bar off (the lines of a log): not here.
unset CI
on_tty() { script -qfec "stty cols 160; $*" /dev/null; }
redraws() { grep -o $'\repoch [0-9]/2 \\[' "$1" | wc -l; }

on_tty "$tmp/tiny --epochs 2 --log-every 1" > "$tmp/tty.txt"
[ "$(redraws "$tmp/tty.txt")" -eq 8 ] && ok "8 redraws (one a step, log-every 1)" || bad "$(redraws "$tmp/tty.txt") redraws, expected 8"
grep -q 'step      1/8' "$tmp/tty.txt" && bad "plain lines on the terminal too" || ok "no plain lines on the terminal"
# Each epoch's last redraw is its final state: the full bar at 4/4, then
# the line ends and the evaluation line follows on its own.
for e in 1 2; do
  last=$(tr '\n' '\001' < "$tmp/tty.txt" | tr '\r' '\n' | grep "^epoch $e/2 \[" | tail -1)
  [[ "$last" == "epoch $e/2 [##############################] 4/4  "*" samples/s  loss "*"  accuracy "*"  ETA 0:00 (run "*")  mem "*" MB"$'\e[K' ]] &&
    ok "epoch $e's final state: full bar, 4/4" || bad "epoch $e's final state: '$last'"
done
grep -q $'\e\\[K\r\r\nepoch 1/2  eval' "$tmp/tty.txt" && ok "the evaluation line below the finished bar" || bad "evaluation line not after the bar"
# The bar's second redraw of epoch 1: 2 of 4 steps, half the bar.
grep -q $'\repoch 1/2 \\[###############...............\\] 2/4 ' "$tmp/tty.txt" && ok "half a bar at 2/4" || bad "no half bar at 2/4"

# The same run redirected: the plain lines only.
"$tmp/tiny" --epochs 2 --log-every 1 > "$tmp/file.txt" 2>&1
[ "$(grep -c $'\r' "$tmp/file.txt" || true)" -eq 0 ] && ok "no carriage return redirected" || bad "carriage returns in a redirected run"
[ "$(grep -c '^epoch [12]/2  step ' "$tmp/file.txt" || true)" -eq 8 ] && ok "8 plain lines redirected" || bad "plain lines missing"
grep -q '\[#' "$tmp/file.txt" && bad "a bar in a redirected run" || ok "no bar redirected"

# --progress lines on the terminal, CI=1, --quiet: no bar; none: no progress at all.
on_tty "$tmp/tiny --epochs 2 --log-every 1 --progress lines" > "$tmp/lines.txt"
[ "$(redraws "$tmp/lines.txt")" -eq 0 ] && [ "$(grep -c '^epoch [12]/2  step ' "$tmp/lines.txt")" -eq 8 ] &&
  ok "--progress lines: the plain lines on a terminal" || bad "--progress lines on a terminal"
CI=1 on_tty "$tmp/tiny --epochs 2 --log-every 1" > "$tmp/ci.txt"
[ "$(redraws "$tmp/ci.txt")" -eq 0 ] && ok "CI=1: no bar" || bad "a bar under CI=1"
on_tty "$tmp/tiny --epochs 2 --log-every 1 --quiet" > "$tmp/quiet.txt"
[ "$(redraws "$tmp/quiet.txt")" -eq 0 ] && ! grep -q ' step ' "$tmp/quiet.txt" && ok "--quiet: neither" || bad "--quiet shows progress"
on_tty "$tmp/tiny --epochs 2 --log-every 1 --progress none" > "$tmp/none.txt"
[ "$(redraws "$tmp/none.txt")" -eq 0 ] && ! grep -q ' step ' "$tmp/none.txt" && grep -q '^epoch 2/2  eval' "$tmp/none.txt" &&
  ok "--progress none: no progress, the evaluation lines stay" || bad "--progress none"
# --progress bar redirected draws the bar anyway (asked for).
"$tmp/tiny" --epochs 1 --log-every 1 --progress bar > "$tmp/bar.txt" 2>&1
[ "$(grep -o $'\repoch 1/2 \\[' "$tmp/bar.txt" | wc -l)" -eq 0 ] && [ "$(grep -o $'\repoch 1/1 \\[' "$tmp/bar.txt" | wc -l)" -eq 4 ] &&
  ok "--progress bar redirected: 4 redraws" || bad "--progress bar redirected"

# A bad value is refused naming the flag.
if "$tmp/tiny" --progress fancy > "$tmp/bad.txt" 2>&1; then bad "--progress fancy accepted"; fi
grep -q -- "--progress must be auto, bar, lines or none, got 'fancy'" "$tmp/bad.txt" && ok "--progress fancy refused" ||
  { cat "$tmp/bad.txt"; bad "--progress fancy: wrong message"; }
exit $fail
