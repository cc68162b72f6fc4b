#!/usr/bin/env bash
# Bad shards and bad shards() settings: a clear error naming the shard,
# the member and the reason, exit status 1, no crash; on_error = skip
# counts and reports the bad samples and trains on the rest. The shards
# come from tests/data/bad_shards.py (16 samples each, one fault).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
python3 tests/data/bad_shards.py "$tmp" || exit 1
"$kiln" build examples/mlp.kl -o "$tmp/mlp" || exit 1
# expect NAME PATTERN DATA [ARGS...]: training on DATA (a shards(...) call
# or its arguments) must exit 1 and print PATTERN.
expect() { expect_error "$1" "$2" "$tmp/mlp" --steps 4 --batch 4 --quiet --eval-every 0 --set "data=shards($3)" "${@:4}"; }
at() { echo "\"$tmp/$1\", shuffle_buffer = 0"; }
expect "corrupt PNG" "badpng.tar: member 000003.png: not a valid PNG" "$(at badpng.tar)"
expect "truncated PNG" "cutpng.tar: member 000003.png: corrupt PNG data" "$(at cutpng.tar)"
expect "bad JPEG" "badjpg.tar: member 000000.jpg: not a valid JPEG" "$(at badjpg.tar)"
expect "missing field" "nocls.tar: member 000005.cls: missing (sample 000005 has no field cls)" "$(at nocls.tar)"
expect "label out of range" "label42.tar: member 000004.cls: label 42 is out of range for the model's 10 classes" "$(at label42.tar)"
expect "negative label" "negative.tar: member 000007.cls: label -1 is out of range" "$(at negative.tar)"
expect "label not a number" "clstext.tar: member 000002.cls: 'cat' is not an integer class label" "$(at clstext.tar)"
expect "one image of another shape" "shape.tar: member 000006.png: u8[1, 30, 28], where the first sample's field png (the model's input) is u8[1, 28, 28]" "$(at shape.tar)"
expect "data unlike the model's input" "input 'image' is u8[4,1,28,28], but field 'png' of $tmp/rgb.tar is u8[3, 28, 28] per sample (the shapes differ)" "$(at rgb.tar)"
expect "input named after no field" "input 'image' (u8[4,1,28,28]) names no field of the samples in $tmp/pix.tar (fields: pix.png u8[1, 28, 28], cls i64)" "$(at pix.tar)"
expect "member without a key" "nokey.tar: member README: no key and field in its name" "$(at nokey.tar)"
expect "field twice in a sample" "dup.tar: member 000001.png: sample 000001 has field png twice" "$(at dup.tar)"
expect "Fortran-order npy" "fortran.tar: member 000000.npy: a Fortran-order .npy array" "$(at fortran.tar)"
expect "truncated shard" "trunc.tar: member 000013.png: truncated or corrupt data" "$(at trunc.tar)"
expect "not a tar file" "garbage.tar: not a tar archive" "$(at garbage.tar)"
expect "empty shard" "empty.tar: no samples in 1 shard" "$(at empty.tar)"
expect "shard missing from a range" "ok-000001.tar:" "\"$tmp/ok-{000000..000001}.tar\""
expect "not a range" "'{000000..}' is not a range" "\"$tmp/ok-{000000..}.tar\""
expect "a folder" "$tmp: " "\"$tmp\""
expect "bad test shard" "badpng.tar: member 000003.png: not a valid PNG" "\"$tmp/ok-000000.tar\", test = \"$tmp/badpng.tar\"" --eval-every 4
expect "cache" "shards: cache must be memory or none, not 'disk'" "$(at ok-000000.tar), cache = disk"
expect "on_error" "shards: on_error must be fail or skip, not 'ignore'" "$(at ok-000000.tar), on_error = ignore"
expect "workers" "shards: workers must be 1 to 64" "$(at ok-000000.tar), workers = 0"
expect "augment not a list" "shards: augment is a list such as [random_crop(pad = 4), hflip()]" "$(at ok-000000.tar), augment = 1"
expect "unknown augmentation" "shards: unknown augmentation (expected random_crop(pad), hflip() or normalize(mean, std))" "$(at ok-000000.tar), augment = [rotate(10)]"
expect "augmentation twice" "shards: hflip is given twice in augment" "$(at ok-000000.tar), augment = [hflip(), hflip]"
expect "crop pad" "random_crop: pad must be 1 to 64" "$(at ok-000000.tar), augment = [random_crop(pad = 0)]"
expect "normalize std" "normalize: std must be positive numbers" "$(at ok-000000.tar), augment = [normalize(mean = 0.5, std = 0)]"
expect "normalize channels" "ok-000000.tar: normalize has 3 means and 1 std, but field png has 1 channel" "$(at ok-000000.tar), augment = [normalize(mean = [0.5, 0.5, 0.5], std = 0.25)]"
expect "normalized data into a u8 input" "input 'image' is u8[4,1,28,28], but field 'png' of $tmp/ok-000000.tar is f32[1, 28, 28] per sample (the dtype does not convert)" "$(at ok-000000.tar), augment = [normalize(0.5, 0.25)]"
expect "evaluation without a test split" "eval_every = 5, but the data has no test split" "$(at ok-000000.tar)" --set eval_every=5

# on_error = skip: the bad samples are counted, reported and left out.
skip() { # NAME PATTERN SHARD [cache]
  out=$("$tmp/mlp" --steps 3 --batch 4 --eval-every 0 --set "data=shards(\"$tmp/$3\", shuffle_buffer = 0, on_error = skip${4:+, cache = $4})" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! grep -qF -- "$2" <<< "$out"; then
    echo "FAIL: $1: exit $rc, expected 0 and '$2'; got:"; echo "$out" | tail -3; fail=1
  else
    echo "ok: $1: $(grep -F -- "$2" <<< "$out" | head -1)"
  fi
}
skip "skip a corrupt PNG while streaming" "data: 1 training sample skipped while reading (on_error = skip); the first: $tmp/badpng.tar: member 000003.png: not a valid PNG" badpng.tar
skip "skip a label out of range, cached" "kiln: $tmp/label42.tar: 1 sample left out (on_error = skip); the first: $tmp/label42.tar: member 000004.cls: label 42" label42.tar memory
skip "skip a sample without its field" "1 sample left out (on_error = skip); the first: $tmp/nocls.tar: member 000005.cls: missing" nocls.tar
skip "skip a truncated shard's tail" "left out (on_error = skip); the first: $tmp/trunc.tar: member 000013.png: truncated or corrupt data" trunc.tar
exit $fail
