# Sourced by the GPT-2 small tests: examples/gpt2_small.kl at a tiny size
# (vocabulary 512, width 96, context 32; still 12 layers of 12 heads)
# beside token files, as $tmp/m/tiny.kl; the example's own defs and train
# block, only its size line, inputs and data line changed (each checked
# to have matched). The full size's step takes a minute or more on one
# core, and its f64 reference far longer. The tokens take GPT-2's path:
# ids of a 512-token vocabulary (tests/gpt's bytes, + 256 for a byte that
# starts a word) in a .npy, packed by `kiln pack --token-ids` into u16
# token files. Sourced by scripts in tests/gpt, so $0's folder is this one.
source "$(dirname "$0")/../lib.sh"
tiny_gpt2() { # KILN TMP
  local kiln=$1 dir=$2/m model=examples/gpt2_small.kl
  mkdir -p "$dir"
  python3 - "$2/ids.npy" tests/gpt/*.sh tests/gpt/*.c tests/gpt/*.kl <<'PY' || return 1
import struct, sys
text = b"".join(open(f, "rb").read() for f in sorted(sys.argv[2:]))
ids = [c + (256 if i and text[i - 1] in b" \n" else 0) for i, c in enumerate(text)]
h = "{'descr': '<u2', 'fortran_order': False, 'shape': (%d,), }" % len(ids)
h += " " * (63 - (10 + len(h)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<%dH" % len(ids), *ids))
PY
  "$kiln" pack --token-ids "$2/ids.npy" --vocab 512 -o "$dir/data" > /dev/null || return 1
  grep -q '"dtype": "u16"' "$dir/data/manifest.json" || { echo "FAIL: kiln pack --token-ids did not write u16 tokens"; return 1; }
  sed -e 's/^  input \(tokens\|targets\) : i32\[batch, 1024\]$/  input \1 : i32[batch, 32]/' \
      -e 's/gpt(tokens, vocab = 50304, width = 768, heads = 12)/gpt(tokens, vocab = 512, width = 96, heads = 12)/' \
      -e 's#tokens("data/pystd/train.tok", val = "data/pystd/val.tok", context = 1024, val_windows = 16)#tokens("data/train.tok", val = "data/val.tok", context = 32, val_windows = 8)#' \
      "$model" > "$dir/tiny.kl"
  if [ "$(diff "$model" "$dir/tiny.kl" | grep -c '^>')" != 4 ]; then
    echo "FAIL: $model changed: the tiny size's edits did not all apply"; return 1
  fi
}
