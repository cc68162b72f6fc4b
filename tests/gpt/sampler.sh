#!/usr/bin/env bash
# --generate's sampling step (driver/next_token.c) against Python's own
# softmax, for fixed seeded logits over 256 bytes whose spread is a
# trained byte model's (largest logit ~12, not ~0): the counts of 100,000
# draws match softmax(logits / T) restricted to the top k (chi-square,
# bins under 5 expected pooled, bound df + 6 sqrt(2 df)); no draw falls
# outside the k largest; a tiny temperature and temperature 0 are the
# argmax (on a tie the smaller token). Deterministic: fixed seeds. At
# 100,000 draws a temperature 3% off exceeds the bound on average.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
draws=$1
new_tmpdir
fail=0
python3 - "$tmp/logits.txt" "$tmp/tie.txt" <<'PY'
import random, struct, sys
r = random.Random(5)
# Float32-representable values, as the plan's logits are.
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
lg = [f32(r.gauss(0, 2.5)) for _ in range(256)]
for t, v in ((101, 12.0), (32, 11.2), (40, 10.9), (95, 10.1), (61, 9.4)):
    lg[t] = v
open(sys.argv[1], "w").write("".join(f"{x!r}\n" for x in lg))
tie = [0.0] * 256
tie[7] = tie[3] = 4.0
open(sys.argv[2], "w").write("".join(f"{x!r}\n" for x in tie))
PY
check() { # T K SEED
  "$draws" "$1" "$2" "$3" 100000 < "$tmp/logits.txt" > "$tmp/counts.txt" || { bad "sampler_draws $*"; return; }
  python3 - "$tmp/logits.txt" "$tmp/counts.txt" "$@" <<'PY' && ok "T=$1 top_k=$2: draws match softmax(logits / T) over the top k" || bad "T=$1 top_k=$2"
import math, sys
lg = [float(x) for x in open(sys.argv[1])]
cnt = [int(x) for x in open(sys.argv[2])]
T, k = float(sys.argv[3]), int(sys.argv[4])
n = sum(cnt)
order = sorted(range(len(lg)), key=lambda i: (-lg[i], i))
top = order[:k] if 0 < k < len(lg) else order
outside = sum(cnt[i] for i in range(len(lg)) if i not in set(top))
assert outside == 0, f"{outside} draws outside the top {k}"
m = max(lg[i] for i in top)
w = {i: math.exp((lg[i] - m) / T) for i in top}
z = sum(w.values())
exp = sorted(((n * w[i] / z, cnt[i]) for i in top), reverse=True)
bins, pe, po = [], 0.0, 0
for e, o in exp:
    if e >= 5:
        bins.append((e, o))
    else:
        pe, po = pe + e, po + o
if pe > 0:
    bins.append((pe, po))
chi = sum((o - e) ** 2 / e for e, o in bins)
df = len(bins) - 1
bound = df + 6 * math.sqrt(2 * df) if df else 1e-9
top1 = cnt[top[0]] / n
print(f"  chi2 {chi:.1f} over {df} df (bound {bound:.1f}); top token {top1:.4f} drawn, {w[top[0]] / z:.4f} expected")
assert chi <= bound, "counts do not follow softmax(logits / T)"
PY
}
check 0.8 40 1
check 0.5 0 2
check 1 5 3
check 2 0 4
check 1.3 256 5
# The argmax: temperature 0, and a temperature so small that the next
# logit's weight is exp(-800 / 1).
argmax_only() { # FILE T WANT
  "$draws" "$2" 40 9 2000 < "$1" | awk -v want="$3" '$1 != 0 { n++; t = NR - 1 } END { exit !(n == 1 && t == want) }'
}
argmax_only "$tmp/logits.txt" 0 101 && argmax_only "$tmp/logits.txt" 0.001 101 &&
  ok "temperature 0 and 0.001 draw only the largest logit" || bad "temperature -> 0 is not greedy"
argmax_only "$tmp/tie.txt" 0 3 && ok "temperature 0 on a tie: the smaller token" || bad "temperature 0 on a tie"
exit $fail
