#!/usr/bin/env bash
# Every GEMM path, on whatever CPU runs the suite: the exactness and
# agreement checks under one fp32, bf16 or f16 GEMM choice forced with
# runtime/exec/backend_cpu.c's variables, so that a path that only another CPU
# takes by default (AMX on a Xeon, the widened f16 path on a CPU without
# AVX-512, OpenBLAS where oneDNN is missing) is still exercised here.
#
#   gemm_paths.sh KILN REFERENCE_CHECK PATH
#     PATH: f16_amx | f16_avx512 | f16_widened | bf16_onednn | bf16_kiln | bf16_openblas
#           | fp32_onednn | fp32_openblas
#
# For the path: the start-up line names it; the MLP's training step at
# the path's precision (batch 4) against the f64 reference
# (reference_check); and tests/ranks/tp_mlp.kl's 20 steps at T = 2 and under
# zero1 on 2 ranks against one rank (bf16/fp16 within their bound, fp32
# rtol 1e-5: tests/ranks/helpers.bash). The f16 kernels take every size
# when forced (KILN_F16_GEMM=amx|avx512), the small GEMMs of batch 4 too,
# and so does Kiln's bf16 kernel (KILN_BF16_GEMM=kiln).
# A path this CPU cannot take (AMX without AMX-BF16, AVX-512 without it,
# oneDNN without the library or bf16 instructions) is skipped with 77 and
# the refusal's reason.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$testdir/ranks/helpers.bash"
refcheck=$2
path=$3
case $path in
f16_amx) var=KILN_F16_GEMM value=amx prec=fp16 names='f16 GEMMs: Kiln AMX' ;;
f16_avx512) var=KILN_F16_GEMM value=avx512 prec=fp16 names='f16 GEMMs: Kiln AVX-512' ;;
f16_widened) var=KILN_F16_GEMM value=widened prec=fp16 names='f16 GEMMs: sgemm, widened' ;;
bf16_onednn) var=KILN_BF16_GEMM value=onednn prec=bf16 names='bf16 GEMMs: oneDNN [0-9.]* (' ;;
bf16_kiln) var=KILN_BF16_GEMM value=kiln prec=bf16 names='bf16 GEMMs: Kiln AVX-512' ;;
bf16_openblas) var=KILN_BF16_GEMM value=openblas prec=bf16 names='bf16 GEMMs: [A-Za-z]* sgemm, widened' ;;
fp32_onednn) var=KILN_FP32_GEMM value=onednn prec=fp32 names='fp32 GEMMs: oneDNN' ;;
fp32_openblas) var=KILN_FP32_GEMM value=openblas prec=fp32 names='fp32 GEMMs: OpenBLAS sgemm' ;;
*) echo "unknown GEMM path $path"; exit 2 ;;
esac
export "$var=$value"
"$kiln" build tests/ranks/tp_mlp.kl -o "$tmp/tp" > /dev/null
# Can this CPU take the path? The backend refuses a forced choice it
# cannot run, with the reason.
if ! "$tmp/tp" --device cpu --threads 1 --data synthetic:64 --steps 1 --eval-every 0 --precision "$prec" \
  > "$tmp/start.log" 2>&1; then
  if grep -q "$var" "$tmp/start.log"; then
    echo "SKIP: $var=$value cannot run on this CPU: $(grep "$var" "$tmp/start.log" | head -1)"
    exit 77
  fi
  echo "FAIL: $var=$value: the run failed"; cat "$tmp/start.log"; exit 1
fi
grep -q "$names" "$tmp/start.log" || { echo "FAIL: the start-up line does not name $path"; grep GEMMs "$tmp/start.log"; exit 1; }
echo "ok: $var=$value: $(grep -o "$names[^,]*" "$tmp/start.log" | head -1)"
"$refcheck" examples/mlp.kl --batch 4 --set precision="$prec" | tail -1
if [ "$prec" = fp32 ]; then cmp_runs=(same); else cmp_runs=(near "$prec"); fi
one ref "$tmp/tp" --batch 48 --precision "$prec"
ranks 2 t2 "$tmp/tp" --batch 48 --tensor-parallel 2 --precision "$prec"
"${cmp_runs[@]}" ref t2
ranks 2 z2 "$tmp/tp" --batch 24 --shard zero1 --precision "$prec"
"${cmp_runs[@]}" ref z2
echo "gemm_paths.$path: ok"
