# Sourced by the gpt tests: examples/gpt.kl at a tiny size (width 32, 2
# heads, context 16) beside token files packed from tests/gpt, as
# $tmp/m/gpt.kl; the example's own defs, only its size line, inputs and
# data line changed (each checked to have matched). Sourced by scripts in
# tests/gpt, so $0's folder is this one.
source "$(dirname "$0")/../lib.sh"
tiny_gpt() { # KILN TMP
  local kiln=$1 dir=$2/m
  mkdir -p "$dir" "$2/text"
  cp tests/gpt/*.sh tests/gpt/*.c tests/gpt/*.kl "$2/text/"
  "$kiln" pack --text "$2/text" -o "$dir/data" > /dev/null || return 1
  sed -e 's/^  input \(tokens\|targets\) : i32\[batch, 128\]$/  input \1 : i32[batch, 16]/' \
      -e 's/cross_entropy(gpt(tokens, width = 128, heads = 4), targets)/cross_entropy(gpt(tokens, width = 32, heads = 2), targets)/' \
      -e 's#tokens("data/pystd/train.tok", val = "data/pystd/val.tok", context = 128, val_windows = 256)#tokens("data/train.tok", val = "data/val.tok", context = 16, val_windows = 16)#' \
      examples/gpt.kl > "$dir/gpt.kl"
  if [ "$(diff examples/gpt.kl "$dir/gpt.kl" | grep -c '^>')" != 4 ]; then
    echo "FAIL: examples/gpt.kl changed: the tiny config's edits did not all apply"; return 1
  fi
}
