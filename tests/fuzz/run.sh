#!/usr/bin/env bash
# Builds the libFuzzer targets and runs each for SECONDS (default 300).
#
#   tests/fuzz/run.sh [SECONDS]
#
# Needs clang. The build goes to $KILN_FUZZ_BUILD (default build-fuzz in
# the repository root); corpora, logs and crash files go to
# $KILN_FUZZ_OUT (default /tmp/kiln-fuzz), never into the repository: the
# seed corpora under tests/fuzz/ are copied there first and only read.
# The two targets run side by side when there are two cores or more.
# Exits non-zero when either target found a crash, leak, hang or round-trip
# failure; the reproducer is OUT/crashes/TARGET-*, and
#   BUILD/tests/fuzz/fuzz_TARGET OUT/crashes/TARGET-crash-...
# replays it.
set -euo pipefail
seconds=${1:-300}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${KILN_FUZZ_BUILD:-$root/build-fuzz}
out=${KILN_FUZZ_OUT:-/tmp/kiln-fuzz}
fuzz=$root/tests/fuzz

CC=${CC:-clang} cmake -S "$root" -B "$build" -DKILN_FUZZ=ON -DKILN_SANITIZE=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzz_model fuzz_ir >/dev/null

mkdir -p "$out/crashes"
run_target() {
    local kind=$1
    mkdir -p "$out/corpus_$kind"
    cp -n "$fuzz/corpus_$kind"/* "$out/corpus_$kind/" 2>/dev/null || true
    "$build/tests/fuzz/fuzz_$kind" "$out/corpus_$kind" \
        -dict="$fuzz/$kind.dict" -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
        -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$out/crashes/$kind-" >"$out/$kind.log" 2>&1
}

echo "fuzzing fuzz_model and fuzz_ir for ${seconds}s each; logs in $out"
status=0
if [ "$(nproc)" -ge 2 ]; then
    run_target model & model_pid=$!
    run_target ir & ir_pid=$!
    wait "$model_pid" || status=1
    wait "$ir_pid" || status=1
else
    run_target model || status=1
    run_target ir || status=1
fi
for kind in model ir; do
    echo "fuzz_$kind: $(grep -E '^#[0-9]+[[:space:]]' "$out/$kind.log" | tail -1 || true)"
    grep -E 'stat::number_of_executed_units' "$out/$kind.log" || true
done
if [ "$status" -ne 0 ]; then
    echo "found problems; reproducers (newest first) in $out/crashes:"
    ls -1t "$out/crashes" | head
    exit 1
fi
echo "both targets ran clean"
