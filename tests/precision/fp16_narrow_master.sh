#!/usr/bin/env bash
# fp16's optimizer update narrows each f16 weight copy from the fp32 master
# weight it has just stored (codegen/emit_c_stage.c f32_twin), not from a
# staged row beside it:
#  - the fp16 MLP's update kernel stages no row, and its loop of 200,704
#    narrows &master[kl_c] into the copy after each chunk;
#  - the copies hold the master's rounded bits: a run resumed at step 12
#    from a checkpoint (which keeps the fp32 masters only, so the resumed
#    run makes its f16 copies from them at load, not in the update kernel)
#    writes step 24's checkpoint byte for byte as the run that went on.
source "$(dirname "$0")/../lib.sh"
set -euo pipefail
kiln=$1
model=examples/mlp.kl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
k16=$("$kiln" ir "$model" --set precision=fp16 --kernels)
adam=$(printf '%s\n' "$k16" | awk '/^\/\* adam_update/ {on = 1} on {print} on && /^}/ && seen {exit} on && /_body\(/ {seen = 1}')
if printf '%s\n' "$adam" | grep -q 'kl_row'; then
  echo "FAIL: the fp16 update kernel stages rows:" >&2
  printf '%s\n' "$adam" | grep 'kl_row' | head -5 >&2
  fail=1
fi
if ! printf '%s\n' "$adam" | grep -A16 'kl_c < 200704LL' | grep -Eq 'kl_f16_narrow_row\(&b[0-9]+\[kl_c\], &b[0-9]+\[kl_c\], kl_n\);'; then
  echo "FAIL: the update's loop of 200704 does not narrow its copy from the fp32 master" >&2
  fail=1
fi
[ $fail -eq 0 ] && echo "ok: the update narrows the f16 copies from the fp32 masters"
data=/usr/share/datasets/fashion-mnist
run() { "$kiln" run "$model" --device cpu --threads 1 --precision fp16 --eval-every 0 --log-every 100 --data "$data" "$@" 2>&1; }
run --steps 24 --save "$tmp/a.ckpt" --save-every 12 > /dev/null
run --steps 24 --resume "$tmp/a.ckpt.step-12" --save "$tmp/b.ckpt" > /dev/null
if cmp -s "$tmp/a.ckpt" "$tmp/b.ckpt"; then
  echo "ok: step 24's checkpoint the same, byte for byte, resumed at step 12 as whole"
else
  echo "FAIL: step 24's checkpoint differs between the whole run and the one resumed at step 12" >&2
  fail=1
fi
exit $fail
