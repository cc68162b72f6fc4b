#!/usr/bin/env bash
# Dumps what a restructuring must leave byte-identical, one file each, so
# that `diff -r` of two dumps (before and after) is the check:
#
#   scripts/same_output.sh BUILD_DIR OUT_DIR [JOBS]
#
# With BUILD_DIR's kiln, for every model file (.kl) under tests/ and
# examples/ of this tree, at precision fp32, bf16 and fp16:
#   OUT/ir/<model>.<prec>.<stage>  the IR after each stage of `kiln ir
#                                  --help` (or the error, for a stage the
#                                  model does not run),
#   OUT/c/<model>.<prec>.c         the generated C kernels (--kernels),
#   OUT/cuda/<model>.<prec>.cu     the CUDA kernels (--kernels --cuda).
# and the first 5 training steps' losses of examples/mlp.kl and
# examples/fashion_cnn.kl at each precision (seed 1, one thread, from the
# executable's --metrics file, timings left out): OUT/loss/<ex>.<prec>.
# Models are named by their path relative to this tree (run from its root,
# so paths in the output are the same for any checkout). A model whose
# `--after check` fails at a precision keeps only that error (OUT/fail/).
# Timings and host details are left out; nothing else is filtered.
set -uo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 BUILD_DIR OUT_DIR [JOBS]" >&2
    exit 2
fi
build=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && out=$(cd "$2" && pwd) || exit 2
jobs=${3:-2}
kiln=$build/kiln
[ -x "$kiln" ] || { echo "$0: no kiln in $build" >&2; exit 2; }
cd "$(dirname "$0")/.."
mkdir -p "$out/ir" "$out/c" "$out/cuda" "$out/loss" "$out/fail"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KILN_CACHE_DIR=$tmp/cache
stages=$("$kiln" ir --help 2>&1 | sed -n 's/^ *stages: //p' | tr -d ,)
[ -n "$stages" ] || { echo "$0: no stage list in kiln ir --help" >&2; exit 1; }

# One model at one precision: every stage's IR, the C and the CUDA kernels.
dump_one() {
    local f=$1 prec=$2 name
    name=$(echo "${f%.kl}" | tr / _).$prec
    if ! "$kiln" ir "$f" --set precision="$prec" --after check > /dev/null 2> "$out/fail/$name"; then
        return 0
    fi
    rm -f "$out/fail/$name"
    for s in $stages; do
        "$kiln" ir "$f" --set precision="$prec" --after "$s" > "$out/ir/$name.$s" 2>&1 || echo "exit $?" >> "$out/ir/$name.$s"
    done
    "$kiln" ir "$f" --set precision="$prec" --kernels > "$out/c/$name.c" 2>&1 || echo "exit $?" >> "$out/c/$name.c"
    "$kiln" ir "$f" --set precision="$prec" --kernels --cuda > "$out/cuda/$name.cu" 2>&1 || echo "exit $?" >> "$out/cuda/$name.cu"
}
export -f dump_one
export kiln out stages
find tests examples -name '*.kl' | LC_ALL=C sort | while read -r f; do
    for p in fp32 bf16 fp16; do
        printf '%s %s\n' "$f" "$p"
    done
done | xargs -P "$jobs" -n 2 bash -c 'dump_one "$0" "$1"'

# The first losses of both examples.
for ex in mlp fashion_cnn; do
    if ! "$kiln" build "examples/$ex.kl" -o "$tmp/$ex" > "$tmp/$ex.build" 2>&1; then
        echo "$0: kiln build examples/$ex.kl failed:" >&2
        cat "$tmp/$ex.build" >&2
        exit 1
    fi
    for p in fp32 bf16 fp16; do
        "$tmp/$ex" --steps 5 --threads 1 --seed 1 --log-every 1 --precision "$p" --quiet \
            --metrics "$tmp/$ex.$p.jsonl" > /dev/null 2>&1
        echo "exit $?" > "$out/loss/$ex.$p"
        # Every field but the timings and the host's.
        sed -E 's/, "([a-z_]*_s|[a-z_]*seconds|[a-z_]*ms_per_step|[a-z_]*cpu_percent|[a-z_]*rss[a-z_]*bytes)": [^,}]*//g' \
            "$tmp/$ex.$p.jsonl" >> "$out/loss/$ex.$p"
    done
done
n=$(find "$out" -type f | wc -l)
echo "same_output: $n files in $out ($(ls "$out/fail" | wc -l) model/precision pairs that do not compile)"
