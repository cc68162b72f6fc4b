#!/usr/bin/env bash
# Sizes from a setting or a file that overflow or exceed what is there:
# shards(shuffle_buffer = 2^61) corrupted the heap (8 * 2^61 wraps to 0
# bytes) and 1e12 ran out of memory; a buffer never needs more ids than
# the set has, so both train as a buffer of the whole set does, with the
# same losses. A .npy whose shape's product wraps int64 (2^32 x 2^32,
# no data) was read as an empty array; it is refused, naming the member.
# Every run is bounded by timeout 20 (none should take a second).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
python3 tests/sizes/make_shards.py "$tmp" || exit 1
"$kiln" build examples/mlp.kl -o "$tmp/mlp" || exit 1
"$kiln" build tests/data/wds_mlp.kl -o "$tmp/wds" || exit 1
run() { timeout 20 "$tmp/mlp" --steps 4 --batch 4 --threads 1 --eval-every 0 --set "data=shards(\"$tmp/ok.tar\", shuffle_buffer = $1)" 2>&1; }
ref=$(run 16) || { bad "shuffle_buffer = 16: $(tail -2 <<< "$ref")"; exit 1; }
for n in 2305843009213693952 1000000000000 9223372036854775807; do
  out=$(run $n)
  rc=$?
  if [ $rc -eq 0 ] && [ "$(grep '^step\|^done' <<< "$out" | sed 's/ in .*//')" = "$(grep '^step\|^done' <<< "$ref" | sed 's/ in .*//')" ]; then
    ok "shuffle_buffer = $n trains as a buffer of the whole set"
  else
    bad "shuffle_buffer = $n: exit $rc; got:"; tail -3 <<< "$out"
  fi
done
expect_error "npy shape overflow" "npyover.tar: member 000003.feats.npy: the .npy shape has more than 2^40 elements" \
  timeout 20 "$tmp/wds" --steps 2 --threads 1 --quiet --set "data=shards(\"$tmp/npyover.tar\", shuffle_buffer = 0)"
exit $fail
