#!/usr/bin/env bash
# --data PATH on a model whose train block reads shards(..., test = ...):
# the bare path replaces the whole call, and the run names the settings
# it drops (here the test split) instead of dropping them silently.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
"$kiln" pack --idx /usr/share/datasets/fashion-mnist -o pk --limit 200 > /dev/null 2>&1 || { bad "kiln pack"; exit 1; }
sed 's#data      = idx("/usr/share/datasets/fashion-mnist")#data      = shards("pk/train-000000.tar", test = "pk/test-000000.tar", workers = 1)#' \
  "$testdir/../examples/mlp.kl" > m.kl
"$kiln" build m.kl -o m > /dev/null || { bad "kiln build"; exit 1; }
out=$(./m --threads 1 --steps 1 --quiet --data pk/train-000000.tar 2>&1); rc=$?
want="--data pk/train-000000.tar replaces the train block's shards(...) and drops its test, workers"
[ $rc -eq 0 ] && grep -qF -- "$want" <<< "$out" && ok "--data names what it drops: test, workers" ||
  { bad "--data X.tar: exit $rc, expected '$want'"; echo "$out" | head -3; }
# A setting at its default is not named; a run without --data prints no note.
out=$(./m --threads 1 --steps 1 --quiet 2>&1)
grep -q "note:" <<< "$out" && bad "a note without --data: $out" || ok "no note without --data"
exit $fail
