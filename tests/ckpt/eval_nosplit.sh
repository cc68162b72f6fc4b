#!/usr/bin/env bash
# --eval-only on data without a test split (shards(...) with no test =):
# a clear error naming the model file, exit 1, no crash.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" pack --idx /usr/share/datasets/fashion-mnist --limit 64 -o "$tmp/fm" > /dev/null
sed 's|^\(\s*\)data\s*=.*|\1data = shards("fm/train-000000.tar")|' examples/mlp.kl > "$tmp/m.kl"
"$kiln" build "$tmp/m.kl" -o "$tmp/m" > /dev/null
"$tmp/m" --steps 1 --batch 8 --eval-every 0 --quiet --save "$tmp/c.ckpt" > /dev/null
set +e
"$tmp/m" --eval-only --batch 8 --resume "$tmp/c.ckpt" > "$tmp/out.txt" 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "m.kl: --eval-only: the data has no test split to evaluate" "$tmp/out.txt" ||
  { echo "FAIL: exit $rc, expected 1 and the no-test-split error:"; cat "$tmp/out.txt"; exit 1; }
echo "ok: --eval-only without a test split refused"
