#!/usr/bin/env bash
# precision = bf16: attention and its backward read the bf16 q, k, v (and
# dout) the GEMMs before them make, with no cast between, and give f32
# results (out, lse, dq, dk, dv); at fp16 casts feed them f32.
#
#   bf16_operands.sh KILN
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
model=tests/attention/causal_fused.kl
# "OP: operand dtypes -> result dtypes" for each attention op of the plan.
types() {
  "$kiln" ir "$model" --set precision="$1" | python3 -c '
import re, sys
text = sys.stdin.read()
dtype = {}
for m in re.finditer(r"(%[\w.]+) : (\w+)\[", text):
    dtype[m.group(1)] = m.group(2)
for line in text.splitlines():
    m = re.search(r"= (attention\w*)\(([^)]*)\)", line)
    if m:
        results = [dtype[r] for r in re.findall(r"(%[\w.]+) : ", line.split("=")[0])]
        operands = [dtype[o.strip()] for o in m.group(2).split(",")]
        print(m.group(1) + ": " + " ".join(operands) + " -> " + " ".join(results))'
}
got=$(types bf16)
want="attention: bf16 bf16 bf16 -> f32 f32
attention_grad_q: bf16 bf16 bf16 bf16 f32 f32 -> f32
attention_grad_kv: bf16 bf16 bf16 bf16 f32 f32 -> f32 f32"
[ "$got" = "$want" ] && ok "bf16: bf16 operands, f32 results" || { bad "bf16 attention dtypes:"; echo "$got"; }
got=$(types fp16)
[ "$(grep -c ' f16' <<< "$got")" = 0 ] && [ "$(wc -l <<< "$got")" = 3 ] && ok "fp16: f32 operands" ||
  { bad "fp16 attention dtypes:"; echo "$got"; }
exit $fail
