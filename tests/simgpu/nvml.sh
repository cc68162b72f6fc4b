#!/usr/bin/env bash
# NVML on the simulated device: a run's GPU readings come from the
# simulator's NVML, its memory readings from the simulator's own count
# (the total is KILN_SIMULATED_GPU_MEMORY; the peak is what the run
# allocated), and the summary line and --metrics say the readings are
# simulated; kiln doctor reads the driver release from its NVML.
#   nvml.sh KILN
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
build_example mlp "$tmp/mlp"
export KILN_SIMULATED_GPU=h200 KILN_SIMULATED_GPU_MEMORY=2G
"$tmp/mlp" --device cuda --steps 40 --eval-every 0 --data synthetic:6000 --metrics "$tmp/m.json" > "$tmp/log" 2>&1 ||
  { bad "the run failed"; tail -5 "$tmp/log"; exit 1; }
grep -q "no GPU readings" "$tmp/log" && bad "no GPU readings: $(grep 'no GPU readings' "$tmp/log")"
line=$(grep '^host: ' "$tmp/log")
echo "$line"
[[ $line == *"; GPU busy "*" of 2.0 GiB, "*"(the simulated device's readings: only the memory is counted)" ]] &&
  ok "the summary line has the readings, labelled simulated" || bad "the summary line lacks labelled GPU readings"
python3 - "$tmp/m.json" <<'PY' && ok "--metrics: total 2 GiB, a peak within it, gpu_readings_simulated" || fail=1
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
assert s.get("gpu_readings_simulated") is True, s
assert s["gpu_memory_total_bytes"] == 2 << 30, s["gpu_memory_total_bytes"]
assert 0 < s["gpu_memory_peak_bytes"] < 2 << 30, s["gpu_memory_peak_bytes"]
PY
"$kiln" doctor 2>&1 | grep -qE '^  driver +CUDA [0-9.]+, release [0-9.]+ \(simulated\)$' &&
  ok "kiln doctor reads the driver release from the simulated NVML" ||
  { bad "kiln doctor does not read the simulated NVML"; "$kiln" doctor 2>&1 | grep driver; }
exit $fail
