#!/usr/bin/env bash
# Crafted safetensors files read by --init: 300,000 tensors took minutes
# (a pairwise duplicate check and a linear lookup per name); an empty
# tensor at another's offset was reported as an overlap. Both are read
# (and refused only for not fitting the model) within timeout 20.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
python3 tests/sizes/make_st.py "$tmp" || exit 1
"$kiln" build examples/mlp.kl -o "$tmp/mlp" || exit 1
exe=(timeout 20 "$tmp/mlp" --steps 1 --threads 1 --quiet --data synthetic:64 --batch 8)
expect_error "300,000 tensors" "in the file but not in the model (300000): 't0', 't1'" \
  "${exe[@]}" --init "$tmp/many.safetensors"
expect_error --not overlap "empty tensor at another's offset" "empty_at.safetensors: does not fit the model:" \
  "${exe[@]}" --init "$tmp/empty_at.safetensors"
exit $fail
