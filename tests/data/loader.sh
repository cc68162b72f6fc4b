#!/usr/bin/env bash
# The shard loader (tests/data/loader_check.c) on 1,000 Fashion-MNIST
# samples in 7 shards of up to 150, labelled with their numbers: shuffled
# with a buffer of 100, and in file order.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
check=$1
new_tmpdir
python3 tests/data/make_shards.py /usr/share/datasets/fashion-mnist train "$tmp/n" --count 1000 --per-shard 150 \
  --number-labels || exit 1
fail=0
"$check" "$tmp/n-{000000..000006}.tar" 64 100 || fail=1
"$check" "$tmp/n-{000000..000006}.tar" 64 0 || fail=1
exit $fail
