#!/usr/bin/env bash
# kiln pack --token-ids: a tokenizer's output (a 1-D integer .npy, as
# np.save(np.array(enc.encode(text))) writes it) into token files. GPT-2's
# BPE ids (vocabulary 50,257) become u16 tokens with the vocabulary in the
# header; ids read back equal, the split at --val-fraction, the manifest;
# u8 for a vocabulary up to 256 and u32 past 65,536; --vocab pads the
# vocabulary (GPT-2 small's 50,304); bad arrays and flags with their
# messages and no output left.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
# The arrays, as .npy files written by hand (the system Python has no
# NumPy).
python3 - "$tmp" <<'PY' || exit 1
import struct, sys
d = sys.argv[1]
def npy(name, descr, values, shape=None):
    shape = shape or (len(values),)
    h = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(map(str, shape)) + ("," if len(shape) == 1 else ""))
    h += " " * (63 - (10 + len(h)) % 64) + "\n"
    fmt = {"<u2": "H", "<i8": "q", "<i4": "i", "<f4": "f", "|u1": "B", "<u4": "I", "<u8": "Q"}[descr]
    with open(f"{d}/{name}.npy", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
# GPT-2-like ids: 1,000 of them below 50,257, the largest id among them
ids = [(i * 7919 + 13) % 50257 for i in range(1000)]
ids[500] = 50256
npy("gpt2_i8", "<i8", ids)       # np.array(list_of_ints): int64
npy("gpt2_u2", "<u2", ids)       # np.uint16, as GPT-2 data sets store them
npy("bytes", "|u1", [i % 200 for i in range(200)])
npy("wide", "<u4", [5, 70000, 9, 3])
npy("negative", "<i4", [1, 2, -1, 4])
npy("huge", "<u8", [1, 2**63 + 5])
npy("float", "<f4", [1.0, 2.0])
npy("matrix", "<i4", [1, 2, 3, 4, 5, 6], shape=(2, 3))
npy("empty", "<i4", [])
open(f"{d}/ids.txt", "w").write(" ".join(map(str, ids)))
PY
# read DIR SPLIT -> "dtype vocab count first..." from the token file header and body
read_tok() {
  python3 - "$1/$2.tok" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"KILNTOK\0"
ver, dt, count, vocab = struct.unpack_from("<IIQQ", b, 8)
w = {1: "B", 2: "H", 3: "I"}[dt]
toks = struct.unpack_from("<%d%s" % (count, w), b, 48)
print(dt, vocab, count, " ".join(map(str, toks)))
PY
}
for kind in i8 u2; do
  "$kiln" pack --token-ids "$tmp/gpt2_$kind.npy" -o "$tmp/g$kind" > "$tmp/log" || { cat "$tmp/log"; fail=1; continue; }
  tr=$(read_tok "$tmp/g$kind" train) va=$(read_tok "$tmp/g$kind" val)
  want=$(cat "$tmp/ids.txt")
  if [ "$(cut -d' ' -f1-3 <<< "$tr")" = "2 50257 900" ] && [ "$(cut -d' ' -f1-3 <<< "$va")" = "2 50257 100" ] &&
     [ "$(cut -d' ' -f4- <<< "$tr") $(cut -d' ' -f4- <<< "$va")" = "$want" ]; then
    ok "--token-ids ($kind .npy, GPT-2 ids): u16 tokens, vocabulary 50257 (largest + 1), 900 train + 100 val, every id read back"
  else
    bad "--token-ids $kind: train $(cut -c1-60 <<< "$tr"), val $(cut -c1-60 <<< "$va")"
  fi
done
cmp -s "$tmp/gi8/train.tok" "$tmp/gu2/train.tok" && cmp -s "$tmp/gi8/val.tok" "$tmp/gu2/val.tok" &&
  ok "int64 and uint16 arrays of the same ids give the same files" || bad "int64 and uint16 arrays differ"
grep -q '"input": "token-ids"' "$tmp/gu2/manifest.json" && grep -q '"dtype": "u16"' "$tmp/gu2/manifest.json" &&
  grep -q '"vocab": 50257' "$tmp/gu2/manifest.json" && ok "manifest: input token-ids, dtype u16, vocab 50257" ||
  bad "manifest: $(cat "$tmp/gu2/manifest.json")"
"$kiln" pack --token-ids "$tmp/gpt2_u2.npy" --vocab 50304 --val-fraction 0 -o "$tmp/pad" > /dev/null || bad "--vocab 50304"
[ "$(read_tok "$tmp/pad" train | cut -d' ' -f1-3)" = "2 50304 1000" ] && [ ! -e "$tmp/pad/val.tok" ] &&
  ok "--vocab 50304 --val-fraction 0: vocabulary 50304 in the header, one file of 1000 tokens" || bad "--vocab 50304: $(read_tok "$tmp/pad" train | cut -c1-40)"
"$kiln" pack --token-ids "$tmp/bytes.npy" --val-fraction 0 -o "$tmp/b" > /dev/null && [ "$(read_tok "$tmp/b" train | cut -d' ' -f1-5)" = "1 200 200 0 1" ] &&
  ok "ids below 200: u8 tokens, vocabulary 200" || bad "u8 ids: $(read_tok "$tmp/b" train | cut -c1-40)"
"$kiln" pack --token-ids "$tmp/wide.npy" --val-fraction 0 -o "$tmp/w" > /dev/null && [ "$(read_tok "$tmp/w" train)" = "3 70001 4 5 70000 9 3" ] &&
  ok "an id of 70000: u32 tokens, vocabulary 70001" || bad "u32 ids: $(read_tok "$tmp/w" train)"
# ---- bad inputs ----
expect() { expect_error "$1" "$2" "$kiln" pack "${@:3}"; }
expect "negative id" "negative.npy: token id -1 at position 2 is negative" --token-ids "$tmp/negative.npy" -o "$tmp/x"
expect "huge id" "huge.npy: token id above 9223372036854775807 at position 1 is 2^32 or more" --token-ids "$tmp/huge.npy" -o "$tmp/x"
expect "float ids" "float.npy: token ids are a 1-D integer array; this one is a 1-D f32 array" --token-ids "$tmp/float.npy" -o "$tmp/x"
expect "2-D ids" "matrix.npy: token ids are a 1-D integer array; this one is a 2-D i32 array" --token-ids "$tmp/matrix.npy" -o "$tmp/x"
expect "empty ids" "empty.npy: no token ids (an empty array)" --token-ids "$tmp/empty.npy" -o "$tmp/x"
expect "not npy" "ids.txt: not a NumPy .npy file" --token-ids "$tmp/ids.txt" -o "$tmp/x"
expect "vocab too small" "gpt2_u2.npy: token id 50256 is not below --vocab 50000" --token-ids "$tmp/gpt2_u2.npy" --vocab 50000 -o "$tmp/x"
expect "vocab too large" "--vocab 4294967297: token files hold u32 ids at most" --token-ids "$tmp/gpt2_u2.npy" --vocab 4294967297 -o "$tmp/x"
expect "vocab without ids" "--vocab applies to --token-ids only" --text "$tmp/ids.txt" --vocab 300 -o "$tmp/x"
expect "shards flag" "--token-ids writes token files: --limit, --shuffle" --token-ids "$tmp/gpt2_u2.npy" --limit 5 -o "$tmp/x"
expect "too few to split" "bytes.npy: 200 tokens cannot be split with --val-fraction 0.001" --token-ids "$tmp/bytes.npy" --val-fraction 0.001 -o "$tmp/x"
[ ! -e "$tmp/x" ] && ok "no failed run left an output folder" || bad "a failed run left $tmp/x"
exit $fail
