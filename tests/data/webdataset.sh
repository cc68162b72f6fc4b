#!/usr/bin/env bash
# Interoperability: shards written by the webdataset library (installed
# from PyPI into build/pydeps by this test; skipped, exit 77, when PyPI
# cannot be reached) read in Kiln: every sample's PNG pixels, .cls label
# and .npy array as Python wrote them, and a model trains on them.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1 check=$2 pydeps=$3
new_tmpdir
if ! PYTHONPATH="$pydeps" python3 -c "import webdataset, numpy" 2> /dev/null; then
  if ! python3 -m pip install -q --disable-pip-version-check --target "$pydeps" webdataset > "$tmp/pip.log" 2>&1; then
    echo "SKIP: cannot install webdataset from PyPI:"; tail -3 "$tmp/pip.log"; exit 77
  fi
fi
export PYTHONPATH="$pydeps"
python3 tests/data/wds_write.py "$tmp" 100 > "$tmp/expected.txt" || exit 1
ls "$tmp"/wds-00000[0-2].tar > /dev/null || { echo "FAIL: webdataset wrote other shard names"; ls "$tmp"; exit 1; }
"$check" --dump "$tmp/wds-{000000..000002}.tar" 100 > "$tmp/got.raw" || exit 1
# The same sample's lines in name order, as the writer printed them.
sort -s -k1,1n -k2,2 "$tmp/got.raw" > "$tmp/got.txt"
sort -s -k1,1n -k2,2 "$tmp/expected.txt" > "$tmp/want.txt"
fail=0
if cmp -s "$tmp/got.txt" "$tmp/want.txt" && [ "$(wc -l < "$tmp/got.txt")" = 300 ]; then
  echo "ok: 100 samples from webdataset's shards read as written (png, cls, feats.npy: 300 fields)"
else
  echo "FAIL: what Kiln read differs from what webdataset wrote"; diff "$tmp/want.txt" "$tmp/got.txt" | head -5; fail=1
fi
cp tests/data/wds_mlp.kl "$tmp/"
"$kiln" build "$tmp/wds_mlp.kl" -o "$tmp/wds_mlp" || exit 1
if "$tmp/wds_mlp" --steps 10 --log-every 10 > "$tmp/train.txt" 2>&1 &&
   grep "data: .*wds-{000000..000002}.tar: 100 samples in 3 shards; " "$tmp/train.txt" | grep "feats.npy f32\[4\]" |
     grep -q "cls i64"; then
  echo "ok: the model's inputs feats and label read feats.npy and cls: $(grep '^done' "$tmp/train.txt")"
else
  echo "FAIL: training on webdataset's shards"; cat "$tmp/train.txt"; fail=1
fi
exit $fail
