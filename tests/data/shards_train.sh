#!/usr/bin/env bash
# Fashion-MNIST written as PNG shards (tests/data/make_shards.py) trains
# the CNN exactly as the IDX files do: with shuffling off the batches are
# the same bytes, so the losses, the test loss and accuracy are bit for
# bit the same. Shuffled shards give the same losses with 1, 2 and 4
# workers and with cache = memory, and a run stopped mid-epoch and
# resumed gives the losses and final checkpoint of one uninterrupted run.
# One thread throughout (tests/lib.sh).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
src=/usr/share/datasets/fashion-mnist
new_tmpdir
python3 tests/data/make_shards.py "$src" train "$tmp/train" --count 2048 --per-shard 512 || exit 1
python3 tests/data/make_shards.py "$src" t10k "$tmp/test" --per-shard 5000 || exit 1
# The model beside its shards: the train block's paths are relative to it.
sed 's#data      = idx("/usr/share/datasets/fashion-mnist")#data      = shards("train-{000000..000003}.tar", test = "test-{000000..000001}.tar", shuffle_buffer = 0)#' \
  examples/fashion_cnn.kl > "$tmp/cnn.kl"
grep -q 'shards("train' "$tmp/cnn.kl" || { echo "FAIL: the example's data line changed"; exit 1; }
"$kiln" build examples/fashion_cnn.kl -o "$tmp/cnn_idx" || exit 1
"$kiln" build "$tmp/cnn.kl" -o "$tmp/cnn_shards" || exit 1
fail=0
losses() { grep -o '"loss": [^,]*\|"final_accuracy": [^,]*' "$1"; }
same() { # NAME A.json B.json
  if cmp -s <(losses "$2") <(losses "$3") && [ -s "$2" ]; then
    echo "ok: $1 ($(losses "$2" | wc -l) values bit for bit)"
  else
    echo "FAIL: $1"; diff <(losses "$2") <(losses "$3") | head -6; fail=1
  fi
}
common=(--batch 32 --steps 12 --log-every 1)
"$tmp/cnn_idx" "${common[@]}" --set 'data=idx("/usr/share/datasets/fashion-mnist", shuffle = 0)' --metrics "$tmp/idx.json" > /dev/null || fail=1
"$tmp/cnn_shards" "${common[@]}" --metrics "$tmp/sh.json" > "$tmp/sh.out" || fail=1
same "PNG shards, unshuffled, train as the IDX files do (losses, test loss and accuracy)" "$tmp/idx.json" "$tmp/sh.json"
grep -q "data: .*train-{000000..000003}.tar: 2048 samples in 4 shards; png u8\[1, 28, 28\], cls i64; streamed" "$tmp/sh.out" ||
  { echo "FAIL: no start-up data line"; cat "$tmp/sh.out"; fail=1; }

# Shuffled: 1, 2, 4 workers, streamed and cached, all the same.
shuf() { echo "data=shards(\"$tmp/train-{000000..000003}.tar\", shuffle_buffer = 300, workers = $1, cache = $2)"; }
for w in 1 2 4; do
  "$tmp/cnn_shards" "${common[@]}" --eval-every 0 --set "$(shuf $w none)" --metrics "$tmp/w$w.json" > /dev/null || fail=1
done
"$tmp/cnn_shards" "${common[@]}" --eval-every 0 --set "$(shuf 2 memory)" --metrics "$tmp/cache.json" > "$tmp/cache.out" || fail=1
same "2 workers as 1" "$tmp/w1.json" "$tmp/w2.json"
same "4 workers as 1" "$tmp/w1.json" "$tmp/w4.json"
same "cache = memory as streamed" "$tmp/w1.json" "$tmp/cache.json"
grep -q "cache = memory: .* decoded, fits" "$tmp/cache.out" || { echo "FAIL: the cache line"; cat "$tmp/cache.out"; fail=1; }
# Augmented (random crop and flip): the same for 1 and 4 workers and cached.
aug() { echo "data=shards(\"$tmp/train-{000000..000003}.tar\", shuffle_buffer = 300, workers = $1, cache = $2, augment = [random_crop(pad = 4), hflip()])"; }
"$tmp/cnn_shards" "${common[@]}" --eval-every 0 --set "$(aug 1 none)" --metrics "$tmp/a1.json" > /dev/null || fail=1
"$tmp/cnn_shards" "${common[@]}" --eval-every 0 --set "$(aug 4 none)" --metrics "$tmp/a4.json" > /dev/null || fail=1
"$tmp/cnn_shards" "${common[@]}" --eval-every 0 --set "$(aug 2 memory)" --metrics "$tmp/ac.json" > /dev/null || fail=1
same "augmented: 4 workers as 1" "$tmp/a1.json" "$tmp/a4.json"
same "augmented: cache = memory as streamed" "$tmp/a1.json" "$tmp/ac.json"
if cmp -s <(grep -o '"loss": [^,]*' "$tmp/w1.json") <(grep -o '"loss": [^,]*' "$tmp/a1.json"); then
  echo "FAIL: augmentation left the losses as they were"; fail=1
fi
if cmp -s <(grep -o '"loss": [^,]*' "$tmp/w1.json") <(grep -o '"loss": [^,]*' "$tmp/sh.json"); then
  echo "FAIL: shuffle_buffer = 300 gave the unshuffled losses"; fail=1
else
  echo "ok: the shuffled run differs from the unshuffled one"
fi

# Stopped after step 40 of the epoch's 64, resumed to 80 (into epoch 2):
# the same as 80 steps at once.
run=(--batch 32 --log-every 1 --quiet --eval-every 0 --set "$(shuf 2 none)")
"$tmp/cnn_shards" "${run[@]}" --steps 80 --metrics "$tmp/full.json" --save "$tmp/full.ckpt" || fail=1
"$tmp/cnn_shards" "${run[@]}" --steps 40 --save "$tmp/half.ckpt" || fail=1
"$tmp/cnn_shards" "${run[@]}" --steps 80 --resume "$tmp/half.ckpt" --metrics "$tmp/resumed.json" --save "$tmp/resumed.ckpt" || fail=1
grep '"type": "train"' "$tmp/full.json" | sed -n '41,80p' > "$tmp/full.tail"
grep '"type": "train"' "$tmp/resumed.json" > "$tmp/resumed.tail"
if cmp -s <(grep -o '"loss": [^,]*' "$tmp/full.tail") <(grep -o '"loss": [^,]*' "$tmp/resumed.tail") &&
   [ "$(wc -l < "$tmp/resumed.tail")" = 40 ] && cmp -s "$tmp/full.ckpt" "$tmp/resumed.ckpt"; then
  echo "ok: resumed mid-epoch at step 40: steps 41-80 and the final checkpoint as in one run"
else
  echo "FAIL: the resumed run differs"; diff <(grep -o '"loss": [^,]*' "$tmp/full.tail") <(grep -o '"loss": [^,]*' "$tmp/resumed.tail") | head; fail=1
fi
exit $fail
