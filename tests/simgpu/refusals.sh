#!/usr/bin/env bash
# The simulated device is chosen only by a valid KILN_SIMULATED_GPU, and
# bad settings are refused with a message naming them; `kiln doctor`
# names the simulated part.
#   refusals.sh KILN
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
build_example mlp "$tmp/mlp"
run=("$tmp/mlp" --device cuda --steps 1 --data synthetic:200)
expect_error "an unknown part" "KILN_SIMULATED_GPU must be h200, a100 or p100, not 'bogus'" env KILN_SIMULATED_GPU=bogus "${run[@]}"
expect_error "a bad memory size" "KILN_SIMULATED_GPU_MEMORY must be a size such as 24G or 512M, not '3x'" \
  env KILN_SIMULATED_GPU=h200 KILN_SIMULATED_GPU_MEMORY=3x "${run[@]}"
expect_error "a bad device count" "KILN_SIMULATED_GPU_COUNT must be a count from 1 to 64, not '0'" \
  env KILN_SIMULATED_GPU=h200 KILN_SIMULATED_GPU_COUNT=0 "${run[@]}"
expect_error "a missing library" "cannot open the simulated device's library /nonexistent.so" \
  env KILN_SIMULATED_GPU=a100 KILN_SIMGPU_LIB=/nonexistent.so "${run[@]}"
expect_error "a bad KILN_CUDA_ATTENTION" "KILN_CUDA_ATTENTION must be tiled or generated, got 'bogus'" \
  env KILN_SIMULATED_GPU=h200 KILN_CUDA_ATTENTION=bogus "${run[@]}"
expect_error "a bad KILN_CUDA_LT_EPILOGUE" "KILN_CUDA_LT_EPILOGUE must be 0 or 1, not '2'" \
  env KILN_SIMULATED_GPU=h200 KILN_CUDA_LT_EPILOGUE=2 "${run[@]}"
# Device memory too small: for the plan (the error says how much, and hints), and for the
# backend's own workspaces (the failing call, file and line).
expect_error "a plan larger than the device" "of 64.0 MiB free): CUDA_ERROR_OUT_OF_MEMORY" \
  env KILN_SIMULATED_GPU=h200 KILN_SIMULATED_GPU_MEMORY=64M "$tmp/mlp" --device cuda --steps 1 --batch 20000 \
  --data synthetic:20000
expect_error "a device smaller than the workspaces" "failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" \
  env KILN_SIMULATED_GPU=h200 KILN_SIMULATED_GPU_MEMORY=1M "${run[@]}"
out=$(KILN_SIMULATED_GPU=a100 "$kiln" doctor 2>&1)
grep -q "gpu 0     NVIDIA A100-SXM4-80GB (simulated device): sm_80, 108 SMs, 80.0 GiB" <<< "$out" &&
  ok "kiln doctor: $(grep 'gpu 0' <<< "$out")" || { bad "kiln doctor does not name the simulated A100"; echo "$out" | tail -8; }
# An HGX node's 8 devices by default (each local rank of a job takes its own), or KILN_SIMULATED_GPU_COUNT.
[ "$(grep -c "^  gpu [0-9] .*(simulated device)" <<< "$out")" -eq 8 ] && ok "8 simulated devices by default" ||
  bad "kiln doctor does not list 8 simulated devices"
out=$(KILN_SIMULATED_GPU=h200 KILN_SIMULATED_GPU_COUNT=2 "$kiln" doctor 2>&1)
grep -q "gpu 1     NVIDIA H200 (simulated device)" <<< "$out" && ! grep -q "gpu 2 " <<< "$out" &&
  ok "KILN_SIMULATED_GPU_COUNT=2: gpu 0 and gpu 1" || bad "KILN_SIMULATED_GPU_COUNT=2 does not give two devices"
# Without the variable the simulator is never opened (this machine has no driver).
out=$("$kiln" doctor 2>&1)
grep -q "simulated" <<< "$out" && bad "kiln doctor without KILN_SIMULATED_GPU mentions a simulated device" ||
  ok "without KILN_SIMULATED_GPU: no simulated device"
exit $fail
