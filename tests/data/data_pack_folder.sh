#!/usr/bin/env bash
# --data DIR on a folder kiln pack wrote is read through its manifest as
# that folder's shards (train and test splits), not as IDX files (it once
# failed asking for Fashion-MNIST's IDX files); a folder of token files
# and a manifest that is not kiln pack's are refused naming the folder.
# Bytes fed into a float input are named on stderr, not converted
# silently.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
"$kiln" pack --idx /usr/share/datasets/fashion-mnist -o pk --limit 200 > /dev/null 2>&1 || { bad "kiln pack"; exit 1; }
cp "$testdir/../examples/mlp.kl" m.kl
"$kiln" build m.kl -o m > /dev/null || { bad "kiln build"; exit 1; }
out=$(./m --threads 1 --steps 2 --data pk/ 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q 'data: pk/train-000000.tar: 200 samples' <<< "$out" &&
  grep -q 'data: pk/test-000000.tar: 200 samples' <<< "$out" &&
  ok "--data on a pack folder reads its train and test shards" ||
  { bad "--data pk: exit $rc"; echo "$out" | head -5; }
# A folder of token files: its context cannot come from the folder.
printf 'hello, world; hello again\n%.0s' {1..40} > t.txt
"$kiln" pack --text t.txt -o tk > /dev/null 2>&1 || bad "kiln pack --text"
out=$(./m --threads 1 --steps 1 --data tk 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qF -- "--data tk: a kiln pack folder of token files" <<< "$out" &&
  grep -qF -- "--set 'data=tokens(\"tk/train.tok\"" <<< "$out" && ok "a token folder is refused with the tokens(...) form" ||
  { bad "--data tk: exit $rc"; echo "$out" | head -3; }
# A manifest.json that kiln pack did not write.
mkdir other && echo '{"format": "something else"}' > other/manifest.json
out=$(./m --threads 1 --steps 1 --data other 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qF "other/manifest.json is not a kiln pack manifest" <<< "$out" &&
  ok "a foreign manifest is refused naming it" || { bad "--data other: exit $rc"; echo "$out" | head -3; }
# u8 pixels into an f32 input: named, with the two ways to scale them.
sed 's/input image : u8/input image : f32/' m.kl > f.kl
grep -q 'input image : f32' f.kl || { bad "the example's input line changed"; exit 1; }
"$kiln" build f.kl -o f > /dev/null || { bad "kiln build f"; exit 1; }
out=$(./f --threads 1 --steps 1 --quiet --data pk/train-000000.tar 2>&1); rc=$?
want="note: input 'image' (f32[128,1,28,28]) reads field 'png' of pk/train-000000.tar (u8[1, 28, 28])"
[ $rc -eq 0 ] && grep -qF -- "$want" <<< "$out" && grep -qF "as its byte values 0 to 255, unscaled" <<< "$out" &&
  ok "u8 into f32 is named" || { bad "u8 into f32: exit $rc, expected '$want'"; echo "$out" | head -3; }
exit $fail
