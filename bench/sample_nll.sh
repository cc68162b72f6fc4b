#!/usr/bin/env bash
# How likely a language model finds its own samples: draws SEEDS texts of
# TOKENS bytes after PROMPT with --generate, packs each, and prints the
# mean loss (nats per byte) the model assigns to them with --eval-only
# (context-128 windows, as the validation loss), beside the validation
# loss of the same checkpoint. Sampling at temperature 1 without top-k
# should land near the validation loss (a calibrated model's entropy);
# T < 1 and top-k below it.
#
#   bench/sample_nll.sh GPT CKPT DATA [TEMPERATURE] [TOP_K] [TOKENS] [SEEDS] [PROMPT]
#     GPT   the built example (kiln build examples/gpt.kl -o gpt)
#     DATA  its pack (train.tok, val.tok): the validation loss's data
#     defaults: 0.8 40 1000 4 "def "
#   KILN=path/to/kiln (default ./build/kiln). One thread.
set -euo pipefail
kiln=${KILN:-./build/kiln}
gpt=$1 ckpt=$2 data=$3 temp=${4:-0.8} topk=${5:-40} tokens=${6:-1000} seeds=${7:-4} prompt=${8:-def }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
eval_loss() { # TRAIN VAL WINDOWS: the --eval-only loss
  "$gpt" --threads 1 --resume "$ckpt" --eval-only --quiet \
    --set "data=tokens(\"$1\", val = \"$2\", context = 128, val_windows = $3)" 2>&1 |
    sed -n 's/.*eval  loss \([0-9.]*\).*/\1/p' | tail -1
}
sum=0
for s in $(seq 1 "$seeds"); do
  mkdir -p "$out/t$s"
  "$gpt" --threads 1 --resume "$ckpt" --generate "$prompt" --tokens "$tokens" --temperature "$temp" \
    --top-k "$topk" --seed "$s" | head -c -1 > "$out/t$s/sample.txt"
  "$kiln" pack --text "$out/t$s/sample.txt" --val-fraction 0 -o "$out/p$s" > /dev/null
  # Evenly spaced windows of 129 bytes, about one per 129 bytes.
  l=$(eval_loss "$out/p$s/train.tok" "$out/p$s/train.tok" $(((tokens + ${#prompt}) / 129)))
  echo "seed $s: $l nats/byte on its own sample; first 80 bytes: $(head -c 80 "$out/t$s/sample.txt" | tr '\n' '|')"
  sum=$(python3 -c "print($sum + $l)")
done
val=$(eval_loss "$data/train.tok" "$data/val.tok" 256)
python3 -c "print(f'T = $temp, top-k $topk: mean {$sum / $seeds:.4f} nats/byte on its own samples ($seeds x $tokens bytes); validation loss $val')"
