#!/usr/bin/env bash
# Crafted safetensors files read by --init: 300,000 tensors took minutes
# (a pairwise duplicate check and a linear lookup per name); an empty
# tensor at another's offset was reported as an overlap. Both are read
# (and refused only for not fitting the model) within timeout 20. So is a
# crafted checkpoint of 300,000 entries, by kiln ckpt and --resume.
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
python3 tests/sizes/make_ckpt.py "$tmp" || exit 1
out=$(timeout 20 "$kiln" ckpt "$tmp/many.ckpt" 2>&1) && grep -q '^  state  *300000 values' <<< "$out" \
  && ok "kiln ckpt lists 300,000 entries" || bad "kiln ckpt of 300,000 entries: $(tail -2 <<< "$out")"
expect_error "--resume 300,000 entries" "'t0', 't1', 't2', 't3', 't4', 't5' and 299994 more are not values of this model" \
  "${exe[@]}" --resume "$tmp/many.ckpt"
exit $fail
