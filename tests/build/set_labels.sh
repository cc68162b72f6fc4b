#!/usr/bin/env bash
# An error in a train setting names the option it came from: --set KEY
# for --set KEY=VALUE (it said --KEY, e.g. --data:1:1 for --set
# data=shards(...), a flag the user never typed), --data for --data; in
# the training executable and in kiln's tools alike, exit 1.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
build_example mlp
bogus="shards has no argument 'bogus'"
expect_error "--set data=shards(...)" "--set data:1:1: error: $bogus" ./mlp --steps 1 --set 'data=shards("x.tar", bogus = 3)'
expect_error "--data shards(...)" "--data:1:1: error: $bogus" ./mlp --steps 1 --data 'shards("x.tar", bogus = 3)'
expect_error "--set data=shards(workers = 0)" "--set data:1:27: error: shards: workers must be 1 to 64" \
  ./mlp --steps 1 --set 'data=shards("x.tar", workers = 0)'
expect_error "--set epochs=abc" "--set epochs: error: epochs must be an integer" ./mlp --steps 1 --set epochs=abc
expect_error "--set bogus=1" "--set bogus is not a train setting" ./mlp --steps 1 --set bogus=1
expect_error "kiln ir --set data=shards(...)" "--set data:1:1: error: $bogus" \
  "$kiln" ir "$testdir/../examples/mlp.kl" --set 'data=shards("x.tar", bogus = 3)'
expect_error "kiln counters --set data=shards(...)" "--set data:1:1: error: $bogus" \
  "$kiln" counters "$testdir/../examples/mlp.kl" --set 'data=shards("x.tar", bogus = 3)'
exit $fail
