#!/usr/bin/env bash
# tokens(...) as a train block's data: a model on byte-level token files
# packed from text, its paths relative to the model file; the first loss
# is ln(256) (zero logits) and the loss falls; a run resumed from its
# step-10 checkpoint gives the losses and final checkpoint of one run;
# bad files and settings give their messages. One thread (tests/lib.sh).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
fail=0
mkdir -p "$tmp/text" "$tmp/m"
cp tests/gpt/*.sh tests/gpt/*.c tests/gpt/*.kl "$tmp/text/"
"$kiln" pack --text "$tmp/text" -o "$tmp/m/data" > /dev/null || exit 1
cp tests/gpt/tiny_lm.kl "$tmp/m/tiny_lm.kl"
"$kiln" build "$tmp/m/tiny_lm.kl" -o "$tmp/lm" || exit 1
# From another folder: the data paths resolve against the model file.
cd "$tmp"
run=(--log-every 1 --steps 20)
"$tmp/lm" "${run[@]}" --metrics full.json --save full.ckpt --save-every 10 > full.out || fail=1
grep -q "data: .*train.tok: [0-9]* tokens (vocabulary 256), [0-9]* random windows of context 16 + 1" full.out ||
  { echo "FAIL: no data line"; cat full.out; fail=1; }
grep -q "val.tok: .* 20 evenly spaced windows" full.out || { echo "FAIL: no validation data line"; fail=1; }
python3 - full.json <<'PY' || fail=1
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
tr = [r["loss"] for r in recs if r.get("type") == "train"]
ev = [r for r in recs if r.get("type") == "eval"]
assert len(tr) == 20, tr
assert abs(tr[0] - math.log(256)) < 1e-5, f"first loss {tr[0]} is not ln(256) = {math.log(256)}"
assert sum(tr[-4:]) / 4 < tr[0] - 0.5, f"the loss did not fall: {tr}"
assert len(ev) >= 2, "no evaluation records"
print(f"ok: first loss {tr[0]:.6f} = ln(256), last {tr[-1]:.4f}; {len(ev)} validation evaluations")
PY
"$tmp/lm" "${run[@]}" --resume full.ckpt.step-10 --metrics resumed.json --save resumed.ckpt > /dev/null || fail=1
losses() { grep '"type": "train"' "$1" | grep -o '"loss": [^,]*'; }
if cmp -s <(losses full.json | tail -10) <(losses resumed.json) && [ "$(losses resumed.json | wc -l)" = 10 ] &&
   cmp -s full.ckpt resumed.ckpt; then
  echo "ok: resumed at step 10: steps 11-20 and the final checkpoint as in one run"
else
  echo "FAIL: the resumed run differs"; diff <(losses full.json | tail -10) <(losses resumed.json) | head; fail=1
fi
cd - > /dev/null

# Bad files and settings: exit 1 and the message.
expect() { expect_error "$1" "$1" "$tmp/lm" --steps 1 --quiet "${@:2}"; } # MESSAGE ARGS...
d=$tmp/m/data
printf 'not a token file at all, just text: 1234567890123456789012345678901234567890123456789' > "$tmp/text.tok"
python3 - "$tmp" <<'PY'
import struct, sys
tmp = sys.argv[1]
def fnv(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & (2**64 - 1)
    return h
def write(path, dtype, vocab, toks, size):
    body = b"".join(t.to_bytes(size, "little") for t in toks)
    open(path, "wb").write(b"KILNTOK\0" + struct.pack("<IIQQQQ", 1, dtype, len(toks), vocab, fnv(body), 0) + body)
write(f"{tmp}/u16.tok", 2, 1000, [(i * 37) % 1000 for i in range(400)], 2)
write(f"{tmp}/short.tok", 1, 256, list(range(10)), 1)
PY
expect "$tmp/nothere.tok: cannot open: No such file" --set "data=tokens(\"$tmp/nothere.tok\", context = 16)"
expect "$tmp/text.tok: not a Kiln token file" --set "data=tokens(\"$tmp/text.tok\", context = 16)"
expect "$tmp/short.tok: 10 tokens, too few for one window of context 16 + 1" --set "data=tokens(\"$tmp/short.tok\", context = 16)"
expect "$tmp/u16.tok has a vocabulary of 1000 tokens, but input 'tokens' feeds an embedding of 256 rows" \
  --eval-every 0 --set "data=tokens(\"$tmp/u16.tok\", context = 16)"
# The same with the embedding large enough: the cross-entropy's 256 classes.
sed 's/param table : \[256, 32\]/param table : [1000, 32]/' "$tmp/m/tiny_lm.kl" > "$tmp/m/t1000.kl"
"$kiln" build "$tmp/m/t1000.kl" -o "$tmp/t1000" || exit 1
if "$tmp/t1000" --steps 1 --eval-every 0 --set "data=tokens(\"$tmp/u16.tok\", context = 16)" > "$tmp/err.out" 2>&1 ||
   ! grep -qF "$tmp/u16.tok has a vocabulary of 1000 tokens, but input 'targets' feeds a cross_entropy of 256 classes" "$tmp/err.out"; then
  echo "FAIL: a vocabulary larger than the cross-entropy's classes:"; cat "$tmp/err.out"; fail=1
else
  echo "ok: a vocabulary larger than the cross-entropy's classes"
fi
expect "input 'tokens' is i32[8,16], but the token data's context is 8 (tokens(..., context = 8))" \
  --eval-every 0 --set "data=tokens(\"$d/train.tok\", context = 8)"
expect "context must be positive" --set "data=tokens(\"$d/train.tok\", context = 0)"
expect "eval_every = 10, but the data has no validation file" --set "data=tokens(\"$d/train.tok\", context = 16)"
expect "--predict writes one row of class scores per sample; a sample of token data has 16 positions" \
  --resume "$tmp/full.ckpt" --eval-only --predict "$tmp/p.npy"
# A model whose input names no field.
sed 's/input tokens :/input ids :/; s/embedding(tokens,/embedding(ids,/' "$tmp/m/tiny_lm.kl" > "$tmp/m/ids.kl"
"$kiln" build "$tmp/m/ids.kl" -o "$tmp/ids" || exit 1
if "$tmp/ids" --steps 1 > "$tmp/err.out" 2>&1 || ! grep -qF "input 'ids' (i32[8,16]) names no field of the samples in $tmp/m/data/train.tok (fields: tokens i32[16], targets i32[16])" "$tmp/err.out" ||
   ! grep -qF "tokens reads window[0:context], targets window[1:context+1]" "$tmp/err.out"; then
  echo "FAIL: an input named after no field:"; cat "$tmp/err.out"; fail=1
else
  echo "ok: an input named after no field"
fi
exit $fail
