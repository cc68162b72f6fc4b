# Sourced by the GPT-2 small tests: examples/gpt2_small.kl at a tiny size
# (vocabulary 512, width 96, context 32; still 12 layers of 12 heads)
# beside token files packed from tests/gpt, as $tmp/m/tiny.kl; the
# example's own defs and train block, only its size line, inputs and data
# line changed (each checked to have matched). The full size's step takes
# a minute or more on one core, and its f64 reference far longer.
tiny_gpt2() { # KILN TMP
  local kiln=$1 dir=$2/m model=examples/gpt2_small.kl
  mkdir -p "$dir" "$2/text"
  cp tests/gpt/*.sh tests/gpt/*.c tests/gpt/*.kl "$2/text/"
  "$kiln" pack --text "$2/text" -o "$dir/data" > /dev/null || return 1
  sed -e 's/^  input \(tokens\|targets\) : i32\[batch, 1024\]$/  input \1 : i32[batch, 32]/' \
      -e 's/gpt(tokens, vocab = 50304, width = 768, heads = 12)/gpt(tokens, vocab = 512, width = 96, heads = 12)/' \
      -e 's#tokens("data/pystd/train.tok", val = "data/pystd/val.tok", context = 1024, val_windows = 16)#tokens("data/train.tok", val = "data/val.tok", context = 32, val_windows = 8)#' \
      "$model" > "$dir/tiny.kl"
  if [ "$(diff "$model" "$dir/tiny.kl" | grep -c '^>')" != 4 ]; then
    echo "FAIL: $model changed: the tiny size's edits did not all apply"; return 1
  fi
}
