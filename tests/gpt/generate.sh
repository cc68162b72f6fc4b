#!/usr/bin/env bash
# --generate: examples/gpt.kl, tiny (tests/gpt/tiny.sh), trained on a
# file that repeats one 22-byte snippet, must continue "def " greedily
# (temperature 0) with exactly that snippet, for 70 bytes: past its
# 16-byte context, so the window slides, and through bytes whose next
# byte depends on more than the last one ('f' is followed by ' ' and by
# '('). top_k = 1 at any temperature is greedy; a seed gives the same
# text twice and another seed another text; bad flags give messages.
# One thread (tests/lib.sh).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/tiny.sh"
kiln=$1
new_tmpdir
tiny_gpt "$kiln" "$tmp" || exit 1
fail=0
mkdir -p "$tmp/rep"
python3 -c "open('$tmp/rep/a.py', 'w').write('def f(x):\n  return x\n' * 3000)"
"$kiln" pack --text "$tmp/rep" -o "$tmp/m/rep" > /dev/null || exit 1
"$kiln" build "$tmp/m/gpt.kl" -o "$tmp/gpt" || exit 1
"$tmp/gpt" --steps 400 --batch 8 --quiet --eval-every 0 --set "data=tokens(\"$tmp/m/rep/train.tok\", context = 16)" \
  --set 'schedule=warmup_cosine(warmup = 10)' --save "$tmp/r.ckpt" > /dev/null || exit 1
gen() { "$tmp/gpt" --resume "$tmp/r.ckpt" --generate "def " "$@"; }
gen --tokens 70 --temperature 0 > "$tmp/greedy.txt" || fail=1
python3 - "$tmp/greedy.txt" <<'PY' || fail=1
import sys
got = open(sys.argv[1], "rb").read()
want = (b"def f(x):\n  return x\n" * 5)[:4 + 70] + b"\n"
assert got == want, f"greedy text {got!r}, expected {want!r}"
print("ok: greedy continues 'def ' with the training snippet for 70 bytes")
PY
gen --tokens 70 --temperature 1.5 --top-k 1 --seed 9 > "$tmp/top1.txt" || fail=1
cmp -s "$tmp/greedy.txt" "$tmp/top1.txt" && echo "ok: top_k = 1 is greedy" || { echo "FAIL: top_k = 1 differs from greedy"; fail=1; }
for s in 1 1 2; do gen --tokens 40 --temperature 3 --top-k 40 --seed $s > "$tmp/s$s.$RANDOM.txt" || fail=1; done
files=("$tmp"/s1.*.txt)
if [ "${#files[@]}" = 2 ] && cmp -s "${files[0]}" "${files[1]}" && ! cmp -s "${files[0]}" "$tmp"/s2.*.txt; then
  echo "ok: the same seed draws the same text, another seed another"
else
  echo "FAIL: sampling is not a function of the seed"; head "$tmp"/s*.txt; fail=1
fi
# A prompt longer than the context: its last 16 bytes lead.
"$tmp/gpt" --resume "$tmp/r.ckpt" --generate "zzzzzzzzzzzzzzzzzz return x
def f" --tokens 10 --temperature 0 | tail -c 11 > "$tmp/long.txt" || fail=1
printf '(x):\n  ret\n' | cmp -s - "$tmp/long.txt" && echo "ok: a prompt longer than the context" ||
  { echo "FAIL: long prompt gave"; od -c "$tmp/long.txt"; fail=1; }

expect() { expect_error "$1" "$1" "$tmp/gpt" "${@:2}"; } # MESSAGE ARGS...
expect "--generate needs the trained values: --resume CKPT" --generate "def "
expect "--generate needs a prompt of at least one byte" --generate "" --resume "$tmp/r.ckpt"
expect "--tokens needs a count from 1 to 65536 (--generate's limit: one forward pass of the model per byte), got '0'" --generate "def " --resume "$tmp/r.ckpt" --tokens 0
expect "--temperature needs a finite number from 0" --generate "def " --resume "$tmp/r.ckpt" --temperature -1
expect "--top-k needs a count from 0 (0: all), got 'x'" --generate "def " --resume "$tmp/r.ckpt" --top-k x
expect "--tokens, --temperature and --top-k go with --generate TEXT" --top-k 5
expect "--generate trains nothing and writes no file" --generate "def " --resume "$tmp/r.ckpt" --save "$tmp/x.ckpt"
expect "$tmp/nothere.ckpt" --generate "def " --resume "$tmp/nothere.ckpt"
# A model that is not a byte-level language model.
sed 's/param out : \[32, 256\]/param out : [32, 300]/' tests/gpt/tiny_lm.kl > "$tmp/m/v300.kl"
"$kiln" build "$tmp/m/v300.kl" -o "$tmp/v300" && "$tmp/v300" --steps 1 --quiet --eval-every 0 --save "$tmp/v.ckpt" > /dev/null || fail=1
if "$tmp/v300" --resume "$tmp/v.ckpt" --generate "a" > "$tmp/err.out" 2>&1 ||
   ! grep -qF "the model's vocabulary must be 256 (byte-level tokens); it is 300" "$tmp/err.out"; then
  echo "FAIL: a vocabulary of 300:"; cat "$tmp/err.out"; fail=1
else
  echo "ok: a model whose vocabulary is not 256 bytes"
fi
exit $fail
