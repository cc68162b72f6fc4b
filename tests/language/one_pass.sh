#!/usr/bin/env bash
# A GEMM epilogue with bias gradients has two CPU forms
# (codegen/k_colsum.c one_pass_host_body): with no more threads than
# 256-column chunks, one pass that computes, stores and sums each row in
# turn; with more, the body's two passes (every element, then the column
# lanes). Both store the same values and sum each column in row order:
# tests/gpt/tiny.sh's GPT (bias gradients 32 and 128 wide: one chunk)
# trained 8 steps of batch 32 (work enough for an OpenMP region: a kernel
# below it runs on one thread, in one pass) at 1 thread (one pass) and at
# 2 and 3 threads (two passes) must write byte-identical checkpoints, and
# its loss must fall. Seen to fail with the one-pass sums started at 1e-3.
# The GEMMs run on OpenBLAS on one thread (KILN_GEMM_THREADS=1): its sums
# depend on its thread count under some of its cores (OPENBLAS_CORETYPE=
# Haswell, which a machine may set), and oneDNN's may split a long sum
# across threads on some CPUs.
#   one_pass.sh KILN
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../gpt/tiny.sh"
kiln=$1
new_tmpdir
tiny_gpt "$kiln" "$tmp" || exit 1
"$kiln" build "$tmp/m/gpt.kl" -o "$tmp/gpt" > /dev/null 2>&1 || { echo "FAIL: building the tiny GPT"; exit 1; }
for t in 1 2 3; do
  KILN_GEMM_THREADS=1 "$tmp/gpt" --steps 8 --batch 32 --threads "$t" --fp32-gemm openblas --eval-every 0 --log-every 1 --metrics "$tmp/t$t.json" \
    --save "$tmp/t$t.ckpt" > "$tmp/t$t.log" 2>&1 || { cat "$tmp/t$t.log"; echo "FAIL: training at $t threads"; exit 1; }
done
grep -q 'OpenBLAS on 1 thread (KILN_GEMM_THREADS)' "$tmp/t2.log" || { echo "FAIL: the start-up line does not name KILN_GEMM_THREADS"; exit 1; }
if KILN_GEMM_THREADS=0 "$tmp/gpt" --steps 1 --eval-every 0 > "$tmp/bad.log" 2>&1 || ! grep -q "KILN_GEMM_THREADS must be a thread count from 1 to 4096, got '0'" "$tmp/bad.log"; then
  cat "$tmp/bad.log"; echo "FAIL: KILN_GEMM_THREADS=0 was not refused by name"; exit 1
fi
cmp "$tmp/t1.ckpt" "$tmp/t2.ckpt" && cmp "$tmp/t1.ckpt" "$tmp/t3.ckpt" ||
  { echo "FAIL: the one-pass (1 thread) and two-pass (2, 3 threads) epilogues wrote different checkpoints"; exit 1; }
python3 - "$tmp/t1.json" <<'PY' || exit 1
import json, sys
tr = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"type": "train"' in l]
assert len(tr) == 8 and tr[-1] < tr[0], f"the loss did not fall: {tr}"
PY
echo "ok: checkpoints byte-identical at 1, 2 and 3 threads (one pass and two passes); loss fell"
