#!/usr/bin/env bash
# A small model's checkpoint and safetensors export, mutated 2000 times
# (tests/ckpt/mutate.c): every mutant is read whole or refused, no crash.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
mutate=$2
enter_tmpdir
sed 's/dense(x, 256)/dense(x, 4)/; s/dense(x, 128)/dense(x, 3)/; s/batch     = 128/batch = 8/' "$testdir/../examples/mlp.kl" > tiny.kl
"$kiln" build tiny.kl -o tiny || exit 1
./tiny --threads 1 --quiet --data synthetic:64 --steps 2 --save t.ckpt > /dev/null || exit 1
"$kiln" export t.ckpt -o t.safetensors || exit 1
ls -l t.ckpt t.safetensors
"$mutate" t.ckpt t.safetensors 2000 7
