#!/usr/bin/env bash
# Runs one libFuzzer target for 8 seconds from a copy of its seed corpus.
#   short_run.sh FUZZER SEEDS SCRATCH
set -u
fuzzer=$1 seeds=$2 scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch/corpus"
cp "$seeds"/* "$scratch/corpus/"
"$fuzzer" "$scratch/corpus" -max_total_time=8 -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$scratch/" -print_final_stats=1 > "$scratch/log" 2>&1
rc=$?
grep -E '^stat::number_of_executed_units|^Done' "$scratch/log" | head -2
if [ $rc -ne 0 ]; then echo "FAIL: $fuzzer exit $rc"; tail -30 "$scratch/log"; exit 1; fi
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/log")
[ "${runs:-0}" -gt 100 ] || { echo "FAIL: only ${runs:-0} inputs run"; exit 1; }
echo "ok: $runs inputs, no crash"
