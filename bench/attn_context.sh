#!/usr/bin/env bash
# Attention's memory and time against context length: a training step of
# causal self-attention alone at T = 128 .. 4096 (batch 1, 4 heads of
# d = 64; q, k and v are embeddings of the tokens, the loss the
# cross-entropy of the next byte over the 256 attention outputs), fused
# (the attention op: the CPU's hand-written kernels) against composed
# (softmax(where(causal mask, q @ k^T / 8, -1e9)) @ v: a [1, 4, T, T]
# score tensor). For each (form, T) it prints the planned arena (`kiln ir
# --after memplan`), the training executable's peak resident memory
# ("host: ... peak resident memory") and its ms per step, then the growth
# of each from T / 2 to T: linear is 2x, quadratic 4x.
#
#   bench/attn_context.sh [STEPS] [THREADS]   KILN=path/to/kiln (default ./build/kiln);
#                                             TS="128 ... 4096" (the T values);
#                                             FORMS="fused composed"
# One form's runs are not alternated with the other's: the memory columns
# are deterministic (arena) or nearly so (RSS); the times are the
# executable's own step timing (its summary's timed_ms_per_step: the steps
# after the first 10, which warm caches; STEPS must exceed 10), so compare
# ratios.
set -euo pipefail
kiln=$(realpath "${KILN:-./build/kiln}")
steps=${1:-14}
[ "$steps" -gt 10 ] || { echo "attn_context.sh: STEPS must exceed 10 (the warm-up steps), got $steps" >&2; exit 1; }
threads=${2:-1}
ts=${TS:-128 256 512 1024 2048 4096}
forms=${FORMS:-fused composed}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Token files: the repository's docs and sources, so every window of the
# longest context exists.
mkdir -p "$dir/text"
cat "$root"/docs/*.md "$root"/docs/*/*.md "$root"/runtime/*/*.c > "$dir/text/all.txt"
"$kiln" pack --text "$dir/text" -o "$dir/data" > /dev/null
model() { # FORM T
  local t=$2
  cat <<KL
def heads(x: f32[b, t, c]) {
  return permute(reshape(x, [b, t, 4, 64]), [0, 2, 1, 3])
}
model m {
  input tokens : i32[batch, $t]
  input targets : i32[batch, $t]
  param eq : [256, 256] init = normal(0, 0.1)
  param ek : [256, 256] init = normal(0, 0.1)
  param ev : [256, 256] init = normal(0, 0.1)
  q = heads(embedding(tokens, eq))
  k = heads(embedding(tokens, ek))
  v = heads(embedding(tokens, ev))
KL
  if [ "$1" = fused ]; then
    echo "  a = attention(q, k, v)"
  else
    echo "  allowed = reshape(arange($t), [$t, 1]) >= arange($t)"
    echo "  a = softmax(where(allowed, q @ transpose(k) * 0.125, -1e9)) @ v"
  fi
  cat <<KL
  loss = cross_entropy(reshape(permute(a, [0, 2, 1, 3]), [batch, $t, 256]), targets)
}
train {
  data = tokens("$dir/data/train.tok", context = $t)
  batch = 1
  optimizer = sgd(lr = 0.01)
  seed = 1
}
KL
}
mb() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1e6 }'; }
echo "kiln attention against context: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads thread(s), $steps steps"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %5s %11s %11s %10s %14s %14s %12s\n' form T arena_MB rss_MB ms_step "arena x T/2" "rss x T/2" "ms x T/2"
for form in $forms; do
  prev_arena='' prev_rss='' prev_ms=''
  for t in $ts; do
    model "$form" "$t" > "$dir/$form$t.kl"
    arena=$("$kiln" ir "$dir/$form$t.kl" --after memplan --format timeline |
            awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ { if ($2 > m) m = $2 } END { print m + 0 }')
    "$kiln" build "$dir/$form$t.kl" -o "$dir/exe" > /dev/null 2>&1
    out=$("$dir/exe" --threads "$threads" --steps "$steps" --eval-every 0 --log-every "$steps" --metrics "$dir/m.json" 2>&1)
    rss=$(sed -n 's/.*peak resident memory \([0-9.]*\) MB.*/\1/p' <<< "$out")
    # The steps after the warm-up ones (the summary's timed_ms_per_step).
    ms=$(sed -n 's/.*"type": "summary".*"timed_ms_per_step": \([0-9.]*\).*/\1/p' "$dir/m.json")
    if [ -z "$rss" ] || [ -z "$ms" ]; then
      echo "FAIL: $form T=$t: no step time or peak memory in the run's output:"
      tail -5 <<< "$out"
      exit 1
    fi
    growth() { [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }' || echo -; }
    printf '%-9s %5d %11s %11s %10s %14s %14s %12s\n' "$form" "$t" "$(mb "$arena")" "$rss" "$ms" \
      "$(growth "$arena" "$prev_arena")" "$(growth "$rss" "$prev_rss")" "$(growth "$ms" "$prev_ms")"
    prev_arena=$arena prev_rss=$rss prev_ms=$ms
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
