#!/usr/bin/env bash
# Shard patterns and samples whose size is the input's to choose (issue 32
# items 15, 16): a pattern whose ranges multiply to 1e12 names is refused
# before any is made (it filled memory); 200,000 missing shards make one
# line with their count and the first, and a sample of 100,000 members
# (one key) is refused at once (the duplicate check was pairwise: minutes).
# Every run is bounded by timeout 10 (none should take more than a second
# or two).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
python3 tests/sizes/make_shards.py "$tmp" || exit 1
python3 tests/sizes/make_wide.py "$tmp" || exit 1
"$kiln" build examples/mlp.kl -o "$tmp/mlp" || exit 1
run() { timeout 10 "$tmp/mlp" --steps 2 --batch 4 --threads 1 --eval-every 0 --set "data=shards(\"$1\")"; }
expect_error "1e12 names" \
  "the pattern names 1000000000000 shards (its ranges multiplied), more than the limit of 1000000" \
  run "$tmp/s-{000000..999999}-{000000..999999}.tar"
expect_error "2^63 names" "the pattern names more than 2^63 - 1 shards" run "$tmp/s-{0..9223372036854775807}.tar"
expect_error "a bound over 2^63" "a bound of the range is over 2^63" run "$tmp/s-{0..99999999999999999999}.tar"
expect_error "200,000 missing" \
  "200000 of the 200000 shards it names are missing (the first: $tmp/none-000000.tar: cannot open: No such file or directory)" \
  run "$tmp/none-{000000..199999}.tar"
[ "$(grep -c 'missing\|cannot open' <<< "$out")" = 1 ] && ok "reported once" || bad "more than one line: $(head -3 <<< "$out")"
cp "$tmp/ok.tar" "$tmp/p-000001.tar"
expect_error "two of three missing" \
  "2 of the 3 shards it names are missing (the first: $tmp/p-000000.tar: cannot open: No such file or directory)" \
  run "$tmp/p-{000000..000002}.tar"
expect_error "one missing" "$tmp/gone.tar: cannot open: No such file or directory" run "$tmp/gone.tar"
expect_error "100,000 members" \
  "wide.tar: member 000000.f001024: sample 000000 has more than 1024 members" run "$tmp/wide.tar"
exit $fail
