#!/usr/bin/env bash
# Augmentation: the loader's random crop (pad 4), flip and normalisation
# of 50 Fashion-MNIST PNG samples (epoch 3, seed 7), streamed and cached,
# against tests/data/augment_ref.py's independent computation from the
# IDX pixels: every f32 value bit for bit.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
check=$1
new_tmpdir
src=/usr/share/datasets/fashion-mnist
python3 tests/data/make_shards.py "$src" train "$tmp/a" --count 50 --per-shard 20 || exit 1
python3 tests/data/augment_ref.py "$src" 50 | sort -s -k1,1n -k2,2 > "$tmp/want" || exit 1
fail=0
for cache in 0 1; do
  "$check" --dump-augmented "$tmp/a-{000000..000002}.tar" 50 $cache | sort -s -k1,1n -k2,2 > "$tmp/got" || exit 1
  if cmp -s "$tmp/want" "$tmp/got" && [ "$(wc -l < "$tmp/got")" = 100 ]; then
    echo "ok: cache $cache: 50 augmented samples as the reference computes them (39,200 f32 values)"
  else
    echo "FAIL: cache $cache: the augmented samples differ from the reference"; cmp "$tmp/want" "$tmp/got"; fail=1
  fi
done
# The reference is not the identity: unaugmented pixels would differ.
"$check" --dump "$tmp/a-{000000..000002}.tar" 50 | grep " png " | head -1 | cut -d' ' -f4- > "$tmp/plain"
grep " png " "$tmp/want" | head -1 | cut -d' ' -f4- > "$tmp/aug"
if cmp -s "$tmp/plain" "$tmp/aug"; then echo "FAIL: augmentation changed nothing"; fail=1; fi
exit $fail
