#!/usr/bin/env bash
# Shards on many ranks (README, "Data on many ranks"): each rank decodes
# only its own rows of every global batch, in the one global order.
#
#   ranks_shards.sh KILN LOADER_CHECK
#
# 1. The loader (tests/data/loader_check.c --ranks) on 1,000 samples
#    labelled with their numbers: 3 ranks x batch 8 against one rank of
#    batch 24, shuffled, streamed and cached, from the start of an epoch
#    and from its middle: every rank's rows are one rank's rows, and the
#    ranks together see each sample exactly once per epoch.
# 2. Training under mpirun: the MLP from shuffled PNG shards (streamed
#    with 2 workers, cache = memory, augmented) on 3 ranks of batch 8
#    against one rank of batch 24: the same losses and final values
#    (tests/ranks/compare.py, rtol 1e-5). One thread per rank (lib.sh).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/ranks/helpers.bash"
check=$2
fail=0

python3 tests/data/make_shards.py /usr/share/datasets/fashion-mnist train "$tmp/n" --count 1000 --per-shard 150 \
  --number-labels || exit 1
"$check" --ranks "$tmp/n-{000000..000006}.tar" 8 100 3 || fail=1

python3 tests/data/make_shards.py /usr/share/datasets/fashion-mnist train "$tmp/train" --count 1200 --per-shard 300 ||
  exit 1
"$kiln" build examples/mlp.kl -o "$tmp/mlp" || exit 1
mpi=(timeout 300 mpirun --allow-run-as-root --oversubscribe)
common=(--steps 20 --eval-every 0 --log-every 1 --quiet)
data() { echo "data=shards(\"$tmp/train-{000000..000003}.tar\", shuffle_buffer = 200, workers = 2$1)"; }
for v in streamed cached augmented; do
  case $v in
  streamed) extra="" ;;
  cached) extra=", cache = memory" ;;
  augmented) extra=", augment = [random_crop(pad = 4), hflip()]" ;;
  esac
  "$tmp/mlp" "${common[@]}" --batch 24 --set "$(data "$extra")" --metrics "$tmp/one_$v.json" \
    --save "$tmp/one_$v.ckpt" > /dev/null || { echo "FAIL: one rank ($v) did not run"; fail=1; continue; }
  "${mpi[@]}" -np 3 "$tmp/mlp" "${common[@]}" --batch 8 --set "$(data "$extra")" --metrics "$tmp/three_$v.json" \
    --save "$tmp/three_$v.ckpt" > /dev/null || { echo "FAIL: 3 ranks ($v) did not run"; fail=1; continue; }
  if compare losses "$tmp/one_$v.json" "$tmp/three_$v.json" 1e-5 &&
     compare params "$tmp/one_$v.ckpt" "$tmp/three_$v.ckpt" 1e-5; then
    echo "ok: $v shards: 3 ranks x batch 8 train as one rank of batch 24 (20 losses, final values)"
  else
    echo "FAIL: $v shards: 3 ranks differ from one rank"; fail=1
  fi
done
# on_error = skip on ranks: each rank skips among its own rows and the
# closing count is the ranks' sum, and the reason the skipping rank's
# (000003.png is rank 1's row 1 of the first global batch of 4: rank 0
# skipped none, and the line once said "(on another rank)"); rows that
# are all bad are an error, never an empty batch (batch 1: the fourth
# batch is the bad sample alone).
python3 tests/data/bad_shards.py "$tmp" || exit 1
skipdata="data=shards(\"$tmp/badpng.tar\", shuffle_buffer = 0, on_error = skip)"
out=$("${mpi[@]}" -np 2 "$tmp/mlp" --steps 3 --batch 2 --eval-every 0 --set "$skipdata" 2>&1)
if grep -qF "data: 1 training sample skipped while reading (on_error = skip); the first: $tmp/badpng.tar: member 000003.png: not a valid PNG" <<< "$out"; then
  echo "ok: 2 ranks, on_error = skip: the skipped sample counted once, across the ranks, with rank 1's reason"
else
  echo "FAIL: 2 ranks, on_error = skip: no count of 1 skipped sample with its reason"; echo "$out" | tail -3; fail=1
fi
out=$("$tmp/mlp" --steps 5 --batch 1 --eval-every 0 --set "$skipdata" 2>&1)
rc=$?
want="batch 3: all 1 sample of it read here were bad (on_error = skip leaves nothing to train on); the first skipped: $tmp/badpng.tar: member 000003.png: not a valid PNG"
if [ $rc -eq 1 ] && grep -qF -- "$want" <<< "$out"; then
  echo "ok: a batch whose rows are all bad: $want"
else
  echo "FAIL: a batch whose rows are all bad: exit $rc, expected 1 and '$want'"; echo "$out" | tail -3; fail=1
fi

# The control: another seed's order must not match, so the comparison
# can fail.
"$tmp/mlp" "${common[@]}" --batch 24 --seed 2 --set "$(data "")" --metrics "$tmp/seed2.json" > /dev/null || fail=1
if compare losses "$tmp/one_streamed.json" "$tmp/seed2.json" 1e-5 > /dev/null 2>&1; then
  echo "FAIL: another seed gives the same losses: the comparison sees nothing"; fail=1
else
  echo "ok: the control (another seed's order) differs"
fi
exit $fail
