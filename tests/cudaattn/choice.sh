# Which attention kernel the CUDA backend gets (codegen/cuda_attn.c): the
# tiled one for f32 heads up to 128, the generated one for a head of 129
# and for f64, and for every kernel under KILN_CUDA_ATTENTION=generated.
# With the CUDA backend built (second argument `cuda`), a bad
# KILN_CUDA_ATTENTION is refused when the backend starts.
#   bash tests/cudaattn/choice.sh KILN [cuda]
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir

# tiled FILE: how many tiled attention kernels the plan's CUDA C has.
tiled() {
    "$kiln" ir "$1" --kernels --cuda > "$tmp/cuda.txt" || { echo "kiln ir $1 --kernels --cuda failed" >&2; return 1; }
    grep -c '^extern "C" __global__ void __launch_bounds__([0-9, ]*) kk_[0-9a-f]*_tiled(' "$tmp/cuda.txt" || true
}

model() { # NAME DTYPE D
    cat > "$tmp/$1.kl" <<KL
model m {
  param q : $2[2, 20, $3] init = normal(std = 1)
  param k : $2[2, 20, $3] init = normal(std = 1)
  param v : $2[2, 20, $3] init = normal(std = 1)
  loss = mean(attention(q, k, v))
}
KL
}
model d128 f32 128
model d129 f32 129
model f64 f64 16

expect() { # WHAT EXPECTED GOT
    if [ "$3" = "$2" ]; then ok "$1: $3 tiled kernels"; else bad "$1: $3 tiled kernels, expected $2"; fi
}
expect "f32, d = 128 (forward, grad_q, grad_kv)" 3 "$(tiled "$tmp/d128.kl")"
expect "f32, d = 129 (generated)" 0 "$(tiled "$tmp/d129.kl")"
expect "f64 (generated)" 0 "$(tiled "$tmp/f64.kl")"
expect "KILN_CUDA_ATTENTION=generated" 0 "$(KILN_CUDA_ATTENTION=generated tiled "$tmp/d128.kl")"
if grep -q 'kl_fa_' "$tmp/cuda.txt"; then bad "KILN_CUDA_ATTENTION=generated: the program still calls the tiled templates"; fi
if [ "${2:-}" = cuda ]; then
    KILN_CUDA_ATTENTION=flash expect_error "KILN_CUDA_ATTENTION=flash" \
        "KILN_CUDA_ATTENTION must be tiled or generated, got 'flash'" "$kiln" bench "$tmp/d128.kl" --device cuda --repeats 1
fi
exit $fail
