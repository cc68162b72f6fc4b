#!/usr/bin/env bash
# Mutation checks of the CUDA backend's host code on the simulated
# device: each mutation is a one-line change that the simgpu check beside
# it must fail. Not part of the suite (each mutation rebuilds kiln in a
# copy of this tree: minutes); run by hand from the repository root:
#   tests/simgpu/mutations.sh [NAME...]   (default: every mutation)
# Prints one line per mutation, caught or MISSED, and exits 1 if one was
# missed. The copy's kernel cache is the build's (build/kiln-cache).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
root=$(pwd)
[ -f tests/simgpu/train.sh ] || { echo "run from the repository root" >&2; exit 2; }
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
)
new_tmpdir
git ls-files -z | xargs -0 cp --parents -t "$tmp" 2> /dev/null
mkdir -p "$tmp/build"
export CCACHE_BASEDIR=$tmp KILN_CACHE_DIR=$root/build/kiln-cache
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$tmp" -B "$tmp/build" "${launcher[@]}" > "$tmp/configure.log" 2>&1 || { tail "$tmp/configure.log"; exit 2; }
missed=0
for m in "${mutations[@]}"; do
  IFS='|' read -r name file expr check <<< "$m"
  [ $# -gt 0 ] && [[ " $* " != *" $name "* ]] && continue
  cp "$root/$file" "$tmp/$file"
  sed -i "$expr" "$tmp/$file"
  if cmp -s "$root/$file" "$tmp/$file"; then
    echo "$name: the mutation does not apply to $file"; missed=1; continue
  fi
  cmake --build "$tmp/build" -j2 --target kiln_cli kiln_simgpu > "$tmp/build.log" 2>&1 || { echo "$name: does not build"; missed=1; continue; }
  read -r -a words <<< "$check"
  envs=()
  [ "${words[0]}" = env ] && { envs=("${words[1]}"); words=("${words[@]:2}"); }
  script=${words[0]} args=("${words[@]:1}")
  if (cd "$tmp" && env "${envs[@]}" bash "tests/simgpu/$script" "$tmp/build/kiln" "${args[@]}") > "$tmp/$name.log" 2>&1; then
    echo "$name: MISSED by $check"; missed=1
  else
    echo "$name: caught by $check ($(grep -m1 '^FAIL' "$tmp/$name.log"))"
  fi
  cp "$root/$file" "$tmp/$file"
done
exit $missed
