#!/usr/bin/env bash
# examples/gpt.kl end to end on the Python standard library: pack its .py
# files into token files, build, train, print the validation loss curve
# (nats per byte) with the elapsed training time at each evaluation, and
# sample from the final checkpoint.
#
#   bench/gpt.sh [STDLIB] [STEPS] [THREADS]
#     STDLIB   default /usr/lib/python3.11 (Debian's); its own .py files
#              are packed, not the packages in its site-packages
#              (bench/pack_pystd.sh)
#     STEPS    optimizer steps (default 2400, the example's)
#     THREADS  default 1
#   KILN=path/to/kiln (default ./build/kiln); OUT=folder (default a new
#   temporary one, kept: the checkpoint and metrics stay there)
set -euo pipefail
kiln=${KILN:-./build/kiln}
stdlib=${1:-/usr/lib/python3.11}
steps=${2:-2400}
threads=${3:-1}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
KILN=$kiln bash "$(dirname "$0")/pack_pystd.sh" "$stdlib" examples/data/pystd
"$kiln" build examples/gpt.kl -o "$out/gpt"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# The machine's load every 30 s of the run, for its mean (a shared
# machine gives the run less than its threads).
(while sleep 30; do cut -d' ' -f1 /proc/loadavg; done) > "$out/load.txt" &
sampler=$!
trap 'kill $sampler 2>/dev/null || true' EXIT
start=$(date +%s.%N)
/usr/bin/time -f "%U %S" -o "$out/cpu.txt" "$out/gpt" --threads "$threads" --steps "$steps" --log-every 50 \
  --metrics "$out/metrics.jsonl" --save "$out/gpt.ckpt" --save-every 100 > "$out/train.log"
end=$(date +%s.%N)

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
awk '{ s += $1; n++ } END { if (n) printf "load average during the run: mean %.1f over %d samples\n", s / n, n }' "$out/load.txt"
read -r user sys < "$out/cpu.txt"
awk -v u="$user" -v s="$sys" -v n="$steps" \
  'BEGIN { printf "CPU time of the run: %.0f s user + %.0f s system = %.0f ms per step\n", u, s, (u + s) * 1000 / n }'
python3 - "$out/metrics.jsonl" "$start" "$end" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
elapsed, last = 0.0, 0
print("step  train_s  val_loss (nats/byte)")
for r in recs:
    if r["type"] == "train":
        elapsed += r["ms_per_step"] / 1000 * (r["step"] - last)
        last = r["step"]
    elif r["type"] == "eval":
        print(f"{r['step']:5d}  {elapsed:7.0f}  {r['loss']:.4f}")
print(f"wall clock of the run: {float(sys.argv[3]) - float(sys.argv[2]):.0f} s")
PY
"$out/gpt" --threads 1 --resume "$out/gpt.ckpt" --generate "def " --tokens 200 --temperature 0.8 --top-k 40
echo "(files in $out)"
