#!/usr/bin/env bash
# Mutation checks of the CUDA backend's host code on the simulated
# device: each mutation is a one-line change that the simgpu check beside
# it must fail. Not part of the suite; run by hand from the repository
# root, with the build folder built (kiln_cli, kiln_simgpu) and no ctest
# running in it:
#   tests/simgpu/mutations.sh [--build DIR] [NAME...]   (default: build, every mutation)
# In place: the file is changed in the tree, DIR rebuilt (one object and
# the links: seconds), the check run, the file put back (also on an
# interrupt), and DIR rebuilt at the end. Prints one line per mutation,
# caught (with the check's first FAIL line and the simulator's report,
# if any) or MISSED, and exits 1 if one was missed.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
root=$(pwd)
[ -f tests/simgpu/train.sh ] || { echo "run from the repository root" >&2; exit 2; }
build=build
[ "${1:-}" = --build ] && { build=$2; shift 2; }
build=$(cd "$build" && pwd) || exit 2
[ -x "$build/kiln" ] || { echo "$build/kiln is not built" >&2; exit 2; }
# NAME|FILE|SED EXPRESSION|CHECK (a tests/simgpu script and its arguments)
mutations=(
  "stream_wait|runtime/exec/backend_cuda.c|s/^\(        \)CU(kl_cu_api.cuStreamWaitEvent(cb->compute, s->copied, 0));/\1;/|train.sh mlp 20 1e-4 --data synthetic:2000 --no-cuda-graph"
  "copy_short|runtime/exec/backend_cuda.c|s/cuMemcpyDtoDAsync(dptr(dst), s->dev, bytes, cb->compute)/cuMemcpyDtoDAsync(dptr(dst), s->dev, bytes - 4, cb->compute)/|train.sh mlp 20 1e-4 --data synthetic:2000"
  "gemm_ld|runtime/exec/backend_cuda_gemm.c|s/: layout(ab, n, k, n, key->batch, key->stride_b);/: layout(ab, n, k, n + 1, key->batch, key->stride_b);/|train.sh mlp 20 1e-4 --data synthetic:2000"
  "no_algorithm|runtime/exec/backend_cuda_gemm.c|s/if (hs == CUBLAS_STATUS_NOT_SUPPORTED)/if (0)/|env KILN_SIMGPU_LT_NO_ALGORITHM=epilogue train.sh mlp 20 1e-4 --data synthetic:2000"
  "allreduce_stream|runtime/exec/backend_cuda.c|s/k->op, cb->comm, k->what);/k->op, cb->copy, k->what);/|ranks.sh dp"
  "graph_stale|runtime/exec/session.c|s/if (e->graphs\[i\].mask == mask)/if (1)/|train.sh mlp 20 1e-4 --data synthetic:2000 --accumulate 2 --batch 32"
  "freed_early|runtime/exec/backend_cuda.c|/^static bool release_staging/,/^}/s/s->dev = 0, s->dev_cap = 0;/;/|batch_auto.sh"
  "staging_kept|runtime/exec/backend_cuda.c|s/\&\& release_staging(cb_of(be))/\&\& false \&\& release_staging(cb_of(be))/|batch_auto.sh"
  "large_chunk|runtime/exec/backend_cuda.c|s/memcpy(s->host, (const char \*)src + off, n);/memcpy(s->host, src, n);/|large.sh"
  "graph_fallback|runtime/exec/session.c|s/^        gr->failed = true;/        gr->failed = true; return;/|faults.sh graph"
)
new_tmpdir
export KILN_CACHE_DIR=$build/kiln-cache
current=
restore() { [ -n "$current" ] && cat "$tmp/orig" > "$root/$current"; current=; }
trap 'restore; exit 130' INT TERM
trap 'restore' EXIT
rebuild() { cmake --build "$build" -j2 --target kiln_cli kiln_simgpu > "$tmp/build.log" 2>&1; }
missed=0
for m in "${mutations[@]}"; do
  IFS='|' read -r name file expr check <<< "$m"
  [ $# -gt 0 ] && [[ " $* " != *" $name "* ]] && continue
  cp "$root/$file" "$tmp/orig"
  current=$file
  sed -i "$expr" "$root/$file"
  if cmp -s "$tmp/orig" "$root/$file"; then
    echo "$name: the mutation does not apply to $file"; missed=1; restore; continue
  fi
  t0=$(date +%s)
  rebuild || { echo "$name: does not build"; tail -5 "$tmp/build.log"; missed=1; restore; continue; }
  read -r -a words <<< "$check"
  envs=()
  [ "${words[0]}" = env ] && { envs=("${words[1]}"); words=("${words[@]:2}"); }
  script=${words[0]} args=("${words[@]:1}")
  if env ${envs[@]+"${envs[@]}"} bash "tests/simgpu/$script" "$build/kiln" "${args[@]}" > "$tmp/$name.log" 2>&1; then
    echo "$name: MISSED by $check"; missed=1
  else
    why=$(grep -m1 '^FAIL' "$tmp/$name.log")
    san=$(grep -m1 -o 'sanitizer: .*' "$tmp/$name.log" | grep -v 'the process ends')
    echo "$name: caught by $check in $(($(date +%s) - t0)) s: ${why:-exit status non-zero}${san:+; the simulated device: $san}"
  fi
  restore
done
rebuild || { echo "the rebuild of the unchanged tree failed"; exit 2; }
exit $missed
