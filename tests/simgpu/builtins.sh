#!/usr/bin/env bash
# Kernels embedded in the executable (kiln build --cuda-arch) on the
# simulated device: built with KILN_SIMULATED_GPU set, the images are the
# simulator's NVRTC's (tests/simgpu/sim_nvrtc.c), and an executable built
# for sm_90 starts on the simulated H200 without compiling its training
# plan's kernels and trains to the CPU backend's losses (relative 1e-4);
# one built for sm_80 only compiles them for sm_90 at start, as on a GPU
# of another architecture, and trains to the same losses.
#   builtins.sh KILN
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
common=(--steps 6 --log-every 1 --seed 1 --eval-every 0 --data synthetic:2000)
for arch in sm_90 sm_80; do
  KILN_SIMULATED_GPU=h200 "$kiln" build examples/mlp.kl -o "$tmp/mlp_$arch" --cuda-arch "$arch" > "$tmp/build_$arch.log" 2>&1 ||
    { bad "kiln build --cuda-arch $arch"; tail -5 "$tmp/build_$arch.log"; exit 1; }
done
"$tmp/mlp_sm_90" --device cpu "${common[@]}" --metrics "$tmp/cpu.json" > "$tmp/cpu.log" 2>&1 || { bad "the CPU run failed"; exit 1; }
for arch in sm_90 sm_80; do
  KILN_SIMULATED_GPU=h200 "$tmp/mlp_$arch" --device cuda "${common[@]}" --metrics "$tmp/$arch.json" > "$tmp/$arch.log" 2>&1 ||
    { bad "$arch: the run on the simulated device failed"; tail -5 "$tmp/$arch.log"; continue; }
  ! grep -q "simulated device:" "$tmp/$arch.log" || { bad "$arch: the simulator reported:"; grep "simulated device:" "$tmp/$arch.log" | head -3; }
  paste <(train_losses "$tmp/cpu.json") <(train_losses "$tmp/$arch.json") | awk -v a="$arch" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; n++ }
    END { printf "%s: %d steps, max relative loss difference %.3g\n", a, n, w; exit !(n == 6 && w < 1e-4) }' &&
    ok "built for $arch: the CPU run's losses" || bad "built for $arch: the losses differ from the CPU run's"
done
# Each plan prepared at start that lacks kernels compiles them (a line
# "kiln: NVRTC ...: N kernels for sm_90"): built for sm_80, the training
# plan and the evaluation plan; built for sm_90, only the evaluation plan,
# whose batch the test set's size decides at start (synthetic:2000's 334
# samples here, not the train block's data set's).
n90=$(grep -c "kiln: NVRTC .* kernels for sm_90" "$tmp/sm_90.log")
n80=$(grep -c "kiln: NVRTC .* kernels for sm_90" "$tmp/sm_80.log")
[ "$n80" -eq 2 ] && [ "$n90" -eq 1 ] &&
  ok "built for sm_90: the training plan's kernels embedded, none compiled at start ($(grep -m1 -o '[0-9]* kernels for sm_90' "$tmp/sm_80.log") for it when built for sm_80)" ||
  bad "expected 2 plans compiled at start built for sm_80 and 1 built for sm_90, got $n80 and $n90"
exit $fail
