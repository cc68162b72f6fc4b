#!/usr/bin/env bash
# fp16 kernels' chunked loops (codegen/emit_c.c STAGE_CHUNK) take 256 elements a chunk, so that a chunk's F16C conversions
# overlap the next chunk's arithmetic: the MLP's Adam update with its f16
# weight copies (a loop of 200,704) and its input scaling run in chunks
# of 256 with rows of 256 floats, no longer 2048; fp32's kernels have no
# chunks (nothing to convert).
source "$(dirname "$0")/../lib.sh"
set -euo pipefail
kiln=$1
model=examples/mlp.kl
k16=$("$kiln" ir "$model" --set precision=fp16 --kernels)
chunks=$(printf '%s\n' "$k16" | grep -o 'kl_c += [0-9]*LL' | sort | uniq -c)
printf 'fp16 chunks:\n%s\n' "$chunks"
adam=$(printf '%s\n' "$k16" | grep -A4 'for (int64_t kl_c = 0; kl_c < 200704LL' || true)
if ! printf '%s\n' "$adam" | grep -q 'kl_c += 256LL'; then
  echo "FAIL: the Adam update's loop of 200704 is not in chunks of 256:" >&2
  printf '%s\n' "$adam" >&2
  exit 1
fi
if printf '%s\n' "$k16" | grep -E 'kl_c \+= [0-9]+LL' | grep -vq 'kl_c += 256LL'; then
  echo "FAIL: a chunk of other than 256 elements" >&2
  exit 1
fi
rows=$(printf '%s\n' "$k16" | grep -A3 'const int64_t kl_n = ' | grep -o 'kl_row[0-9]*\[[0-9]*\]' | sort -u)
if printf '%s\n' "$rows" | grep -vq '\[256\]'; then
  printf 'FAIL: a chunk stages rows longer than 256: %s\n' "$(printf '%s' "$rows" | tr '\n' ' ')" >&2
  exit 1
fi
n32=$("$kiln" ir "$model" --set precision=fp32 --kernels | grep -c 'kl_c += ' || true)
if [ "$n32" != 0 ]; then
  echo "FAIL: fp32 kernels have $n32 chunked loops" >&2
  exit 1
fi
echo "fp16 chunks of 256; fp32 none"
