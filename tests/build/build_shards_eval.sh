#!/usr/bin/env bash
# kiln build precompiles the evaluation kernels for shards data too: it
# counts the test split's samples (the shards' index, as the run does),
# so a run with a fresh kernel cache compiles nothing at start-up or at
# its evaluations (it used to count -1 test samples for shards and leave
# the evaluation batch sizes to the run). The IDX example is the control.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
src=/usr/share/datasets/fashion-mnist
enter_tmpdir
python3 "$testdir/data/make_shards.py" "$src" train train --count 512 --per-shard 256 > /dev/null || exit 1
python3 "$testdir/data/make_shards.py" "$src" t10k test --count 300 --per-shard 200 > /dev/null || exit 1
# 300 test samples at batch 128: an evaluation batch and a remainder.
sed 's#data      = idx("/usr/share/datasets/fashion-mnist")#data      = shards("train-{000000..000001}.tar", test = "test-{000000..000001}.tar", shuffle_buffer = 0)#' \
  "$testdir/../examples/mlp.kl" > m.kl
grep -q 'shards("train' m.kl || { echo "FAIL: the example's data line changed"; exit 1; }
"$kiln" build m.kl -o shards > /dev/null || exit 1
build_example mlp idx
for exe in shards idx; do
  KILN_CACHE_DIR=$tmp/cache-$exe ./$exe --threads 1 --steps 3 --eval-every 2 > $exe.out 2>&1 ||
    { bad "$exe run"; cat $exe.out; continue; }
  evals=$(grep -c ' eval  loss' $exe.out)
  if grep -q 'compiling kernels' $exe.out || [ "$evals" -ne 2 ]; then
    bad "$exe: $evals evaluations, compiled at run time: $(grep 'compiling kernels' $exe.out)"
  else
    ok "$exe: $evals evaluations (last: $(grep -o '([0-9]* samples)' $exe.out | tail -1)), no kernel compiled at run time"
  fi
done
exit $fail
