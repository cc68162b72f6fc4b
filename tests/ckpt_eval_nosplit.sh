#!/usr/bin/env bash
# --eval-only on data without a test split (shards(...) with no test =):
# a clear error naming the model file, exit 1, no crash.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
kiln=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$kiln" pack --idx /usr/share/datasets/fashion-mnist --limit 64 -o "$work/fm" > /dev/null
sed 's|^\(\s*\)data\s*=.*|\1data = shards("fm/train-000000.tar")|' examples/mlp.kl > "$work/m.kl"
"$kiln" build "$work/m.kl" -o "$work/m" > /dev/null
"$work/m" --steps 1 --batch 8 --eval-every 0 --quiet --save "$work/c.ckpt" > /dev/null
set +e
"$work/m" --eval-only --batch 8 --resume "$work/c.ckpt" > "$work/out.txt" 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "m.kl: --eval-only: the data has no test split to evaluate" "$work/out.txt" ||
  { echo "FAIL: exit $rc, expected 1 and the no-test-split error:"; cat "$work/out.txt"; exit 1; }
echo "ok: --eval-only without a test split refused"
