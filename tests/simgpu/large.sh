#!/usr/bin/env bash
# The CUDA backend's paths the examples never take, on the simulated
# device against the CPU backend (tests/simgpu/large.kl): a param of 68 MB,
# over the backend's LARGE_COPY (64 MiB), whose copies to the device go in
# pinned chunks (its upload at start, and a checkpoint's at resume) and to
# the host in 8 MiB pieces; strided-batch GEMMs (a Gram matrix per
# sample, and its gradients). The losses agree
# with the CPU run's within 1e-3 relative: besides the GEMMs' order of
# sums (1e-4, as train.sh), the loss holds a sum over big's 17M elements,
# each at most 1.6e-5, that the two backends add in another order: about
# sqrt(17e6) u = 2.5e-4 of the partial sums (under 0.4 here), so
# up to 1e-4 of the loss, and 1e-3 is 10 times that; a copy of big that
# puts a chunk's elements in another chunk's place moves the loss by about
# 5e-2 (the rows' sums weighted differently). A run resumed on the
# simulated device from its step-2 checkpoint has the uninterrupted run's
# loss for step 3 bit for bit (the same device, the same order
# of sums).
#   large.sh KILN
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build "$testdir/simgpu/large.kl" -o "$tmp/large" > "$tmp/build.log" 2>&1 ||
  { bad "kiln build tests/simgpu/large.kl"; tail -5 "$tmp/build.log"; exit 1; }
common=(--steps 3 --log-every 1 --seed 1 --eval-every 0 --data synthetic:64)
"$tmp/large" --device cpu "${common[@]}" --metrics "$tmp/cpu.json" > "$tmp/cpu.log" 2>&1 ||
  { bad "the CPU run failed"; tail -5 "$tmp/cpu.log"; exit 1; }
sim() { # NAME ARGS...
  local n=$1
  shift
  KILN_SIMULATED_GPU=h200 "$tmp/large" --device cuda "${common[@]}" --metrics "$tmp/$n.json" "$@" > "$tmp/$n.log" 2>&1 ||
    { bad "$n: the run on the simulated device failed"; tail -5 "$tmp/$n.log"; return 1; }
  ! grep -q "simulated device:" "$tmp/$n.log" || { bad "$n: the simulator reported:"; grep "simulated device:" "$tmp/$n.log" | head -3; }
}
# near A B: the losses of A against B's, relative 1e-3.
near() {
  paste <(train_losses "$1") <(train_losses "$2") | awk '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; n++ }
    END { printf "%d steps, max relative loss difference %.3g\n", n, w; exit !(n > 0 && w < 1e-3) }'
}
if sim sim --save "$tmp/sim.ckpt" --save-every 2; then
  near "$tmp/cpu.json" "$tmp/sim.json" && ok "the simulated device's losses are the CPU's" ||
    bad "the simulated device's losses differ from the CPU's"
  [ -f "$tmp/sim.ckpt.step-2" ] || bad "no checkpoint at step 2"
  if sim resumed --resume "$tmp/sim.ckpt.step-2"; then
    [ "$(train_losses "$tmp/resumed.json" | wc -l)" -eq 1 ] || bad "the resumed run did not train step 3 alone"
    cmp -s <(train_losses "$tmp/sim.json" | tail -n 1) <(train_losses "$tmp/resumed.json") &&
      ok "resumed on the simulated device from step 2: the same losses bit for bit ($(train_losses "$tmp/resumed.json" | tr '\n' ' '))" ||
      bad "the resumed run's losses differ: $(train_losses "$tmp/sim.json" | tail -n 1 | tr '\n' ' ')vs $(train_losses "$tmp/resumed.json" | tr '\n' ' ')"
  fi
fi
exit $fail
