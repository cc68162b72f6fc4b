#!/usr/bin/env bash
# lr_scaling's base batch is the train block's batch x accumulate, the
# effective batch its lr was written for, not the --batch override
# (issue 32 item 10). tiny.kl: batch 64, lr 0.003. --batch 16
# --accumulate 4 keeps the effective batch at 64, so the lr stays 0.003
# (it was 0.012); --batch 16 alone is a quarter of it: 0.00075 linear,
# 0.0015 sqrt; --set base_batch=16 still wins: 0.012.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build "$testdir/train/tiny.kl" -o "$tmp/tiny" > /dev/null 2>&1 || { echo "FAIL: kiln build tiny.kl"; exit 1; }
check() { # WANT FLAGS...: the start-up line's lr and every step's "lr" record
  local want=$1
  shift
  "$tmp/tiny" --steps 2 --log-every 1 --set schedule=constant --metrics "$tmp/m.json" "$@" > "$tmp/out.txt" 2>&1 ||
    { bad "$* failed"; cat "$tmp/out.txt"; return; }
  local line lrs
  line=$(grep '^effective batch' "$tmp/out.txt")
  lrs=$(grep '"type": "train"' "$tmp/m.json" | sed 's/.*"lr": \([^,]*\),.*/\1/' | sort -u)
  if [[ "$line" == *"; lr $want "* ]] && [ "$lrs" = "$want" ]; then
    ok "$*: $line"
  else
    bad "$*: lr $want expected; got: $line; records: $lrs"
  fi
}
check 0.003 --batch 16 --accumulate 4 --set lr_scaling=linear
check 0.003 --batch 16 --accumulate 4 --set lr_scaling=sqrt
check 0.00075 --batch 16 --set lr_scaling=linear
check 0.0015 --batch 16 --set lr_scaling=sqrt
check 0.006 --batch 32 --accumulate 4 --set lr_scaling=linear
check 0.012 --batch 16 --accumulate 4 --set lr_scaling=linear --set base_batch=16
check 0.003 --set lr_scaling=linear
grep -q 'from base batch 64)' "$tmp/out.txt" && ok "the start-up line names base batch 64" || bad "no base batch 64 on the start-up line"
exit $fail
