#!/usr/bin/env bash
# --generate reads the logits of the prompt's last byte: examples/gpt.kl,
# tiny (tests/gpt/tiny.sh), trained 150 steps on a
# file that repeats `def f(x):\n  return x\n` (as tests/gpt/generate.sh), and
# for each prompt (1 byte, a few, the whole 16-byte context) the greedy
# byte (--tokens 1 --temperature 0) equals the argmax of row len - 1 of a
# full forward of the prompt alone through the f64 reference evaluator
# (tests/gpt/sampler_prefix_forward.c, the positions after the prompt filled
# with '~'). Prompts whose reference top two logits are within 1e-3 are
# not compared (f32 against f64 could order them either way); at least
# 4 must be compared, and at least one must have rows len - 2 and len
# argmaxes that differ from row len - 1's, so a row off by one fails.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../gpt/tiny.sh"
kiln=$1 forward=$2
new_tmpdir
tiny_gpt "$kiln" "$tmp" || exit 1
fail=0
"$kiln" build "$tmp/m/gpt.kl" -o "$tmp/gpt" || exit 1
mkdir -p "$tmp/rep"
python3 -c "open('$tmp/rep/a.py', 'w').write('def f(x):\\n  return x\\n' * 3000)"
"$kiln" pack --text "$tmp/rep" -o "$tmp/m/rep" > /dev/null || exit 1
"$tmp/gpt" --steps 150 --batch 8 --quiet --eval-every 0 --set "data=tokens(\"$tmp/m/rep/train.tok\", context = 16)" \
  --set 'schedule=warmup_cosine(warmup = 10)' --save "$tmp/c.ckpt" > /dev/null || exit 1
compared=0 shifted=0
for p in 'd' 'de' 'def' 'def f' 'def f(x' 'def f(x):' ' return' 'urn x' 'eturn x' 'f(x):' 'def f(x):   retu' \
         'zq' 'def qq' 'x):'; do
  "$forward" "$tmp/m/gpt.kl" "$tmp/c.ckpt" "$p" > "$tmp/ref.txt" || { bad "reference forward of '$p'"; continue; }
  want=$(head -1 "$tmp/ref.txt")
  if ! python3 - "$tmp/ref.txt" <<'PY'; then continue; fi
import sys
row = sorted(float(x) for x in open(sys.argv[1]).read().split()[1:])
sys.exit(0 if row[-1] - row[-2] > 1e-3 else 1)
PY
  got=$("$tmp/gpt" --resume "$tmp/c.ckpt" --generate "$p" --tokens 1 --temperature 0 | head -c $((${#p} + 1)) | tail -c 1 | od -An -tu1 | tr -d ' ')
  compared=$((compared + 1))
  [ "$got" = "$want" ] || bad "prompt '$p': --generate chose byte $got, the full forward's last row's argmax is $want"
  # Do the neighbouring rows choose another byte? (they would catch a shift)
  if [ ${#p} -ge 2 ] && [ ${#p} -lt 16 ]; then
    a=$("$forward" "$tmp/m/gpt.kl" "$tmp/c.ckpt" "${p:0:$((${#p} - 1))}" | head -1)
    b=$("$forward" "$tmp/m/gpt.kl" "$tmp/c.ckpt" "$p~" | head -1)
    [ "$a" != "$want" ] && [ "$b" != "$want" ] && shifted=$((shifted + 1))
    [ -n "${SAMPLER_DEBUG:-}" ] && echo "$p: $a $want $b"
  fi
done
[ "$compared" -ge 4 ] && ok "greedy byte = the full forward's last-row argmax for $compared prompts" ||
  bad "only $compared prompts compared"
[ "$shifted" -ge 1 ] && ok "$shifted of them would fail with the row before or after the last" ||
  bad "no prompt tells the last row from its neighbours"
exit $fail
