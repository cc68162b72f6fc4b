#!/usr/bin/env bash
# Bad inputs found by the fault-injection probe: huge sizes, files that are
# not regular files, broken gzip data and flag values. Each must give a
# clear error naming what is wrong and exit status 1, quickly: no abort,
# no hang (every command runs under a timeout), no silent acceptance. The
# flag values that should work (--set with a call, --lr with --set
# optimizer, --data DIR) must work, checked by what the run prints.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
src=/usr/share/datasets/fashion-mnist
new_tmpdir
fail=0
# check NAME RC PATTERN CMD...: CMD must exit with RC and print PATTERN.
check() {
  local name=$1 want=$2 pattern=$3
  shift 3
  out=$(timeout 120 "$@" 2>&1)
  rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$pattern" <<< "$out"; then
    echo "FAIL: $name: exit $rc (expected $want), expected '$pattern'; got:"
    echo "$out" | tail -4
    fail=1
  else
    echo "ok: $name: $(grep -F -- "$pattern" <<< "$out" | head -1)"
  fi
}
"$kiln" build examples/mlp.kl -o "$tmp/mlp" 2>/dev/null || exit 1
exe=("$tmp/mlp" --steps 1 --threads 1)

# ---- sizes are checked before anything is allocated ----
cat > "$tmp/wide.kl" <<'EOF'
model wide {
  input image : u8[batch, 1, 28, 28]
  input label : i32[batch]
  param w : [784, 1000000000] init = kaiming
  param v : [1000000000, 10] init = kaiming
  loss = cross_entropy((f32(flatten(image)) @ w) @ v, label)
}
EOF
cat > "$tmp/embed.kl" <<'EOF'
model embed {
  input tok : i32[batch]
  input label : i32[batch]
  param e : [99999999999, 8] init = normal
  loss = cross_entropy(embedding(tok, e), label)
}
EOF
check "param [784, 1000000000]" 1 "more than the machine's memory" "$kiln" ir "$tmp/wide.kl"
check "embedding [99999999999, 8]" 1 "more than the machine's memory" "$kiln" ir "$tmp/embed.kl"
check "kiln ir --batch 99999999" 1 "---> try --batch" "$kiln" ir examples/mlp.kl --batch 99999999
check "--batch 99999999" 1 "is smaller than one step (batch 99999999 x accumulate 1)" "${exe[@]}" --batch 99999999
check "--data synthetic:1000000000000" 1 "synthetic:1000000000000 (1000000000000 samples of 788 bytes) needs 788.00 TB" \
  "${exe[@]}" --data synthetic:1000000000000
check "--set accumulate=1000000000" 1 "is smaller than one step (batch 128 x accumulate 1000000000)" \
  "${exe[@]}" --set accumulate=1000000000
check "kiln ir --set accumulate=1000000000" 0 "accumulate = 1000000000" \
  "$kiln" ir examples/mlp.kl --set accumulate=1000000000

# ---- FIFOs and devices are refused, not waited on ----
mk() { rm -rf "$tmp/d" && mkdir "$tmp/d" && cp "$src"/* "$tmp/d"/; }
mk; rm "$tmp/d/train-labels-idx1-ubyte.gz"; mkfifo "$tmp/d/train-labels-idx1-ubyte.gz"
check "FIFO as a data file" 1 "train-labels-idx1-ubyte.gz: not a regular file (a FIFO)" "${exe[@]}" --data "$tmp/d"
mkfifo "$tmp/fifo.ckpt"
check "FIFO to --resume" 1 "fifo.ckpt: not a regular file (a FIFO)" "${exe[@]}" --resume "$tmp/fifo.ckpt"
check "device to --resume" 1 "/dev/zero: not a regular file (a character device)" "${exe[@]}" --resume /dev/zero

# ---- gzip and IDX faults are named as what they are ----
mk; python3 -c "import sys; d=bytearray(open(sys.argv[1],'rb').read()); d[-6]^=0xff; open(sys.argv[1],'wb').write(d)" \
  "$tmp/d/t10k-labels-idx1-ubyte.gz"
check "gzip CRC error" 1 "t10k-labels-idx1-ubyte.gz: corrupt gzip data (incorrect data check)" \
  "${exe[@]}" --data "$tmp/d"
mk; head -c -8 "$src/t10k-labels-idx1-ubyte.gz" > "$tmp/d/t10k-labels-idx1-ubyte.gz"
check "gzip without its trailer" 1 "t10k-labels-idx1-ubyte.gz: truncated or corrupt: the gzip data ends early" \
  "${exe[@]}" --data "$tmp/d"
mk; printf 'garbage' >> "$tmp/d/t10k-labels-idx1-ubyte.gz"
check "garbage after the gzip data" 1 "t10k-labels-idx1-ubyte.gz: corrupt: trailing garbage after the gzip data" \
  "${exe[@]}" --data "$tmp/d"
mk; { gzip -dc "$src/t10k-labels-idx1-ubyte.gz"; printf '\1\2\3'; } | gzip > "$tmp/d/t10k-labels-idx1-ubyte.gz"
check "labels after the announced count" 1 "t10k-labels-idx1-ubyte.gz: corrupt: data after the 10000 bytes the header announces" \
  "${exe[@]}" --data "$tmp/d"
touch "$tmp/plain"
check "data folder that is a file" 1 "plain: the data is a folder of IDX files, and this is not a folder" "${exe[@]}" --data "$tmp/plain"
if [ "$(id -u)" -ne 0 ]; then
  mk; chmod 000 "$tmp/d"
  check "unreadable data folder" 1 "cannot read train-images-idx3-ubyte(.gz): Permission denied" "${exe[@]}" --data "$tmp/d"
  chmod 755 "$tmp/d"
fi

# ---- flag values ----
check "--set optimizer=sgd(lr=0.1)" 0 "; lr 0.1," "${exe[@]}" --set 'optimizer=sgd(lr=0.1)'
check "--set loss_scale=static(8)" 0 "scale 8  skipped 0" "${exe[@]}" --precision fp16 --log-every 1 --set 'loss_scale=static(8)'
check "--set with a bad call" 1 "--set optimizer:1:8: error: expected a value, found ')'" "${exe[@]}" --set 'optimizer=sgd(lr=)'
check "--lr before --set optimizer=sgd" 0 "; lr 0.5," "${exe[@]}" --lr 0.5 --set optimizer=sgd
ln -s "$src" "$tmp/data"
check "--data data (a bare folder name)" 0 "60000 train / 10000 test samples" \
  bash -c "cd '$tmp' && ./mlp --steps 1 --threads 1 --data data"
check "--set shard=zero4" 1 "shard must be none, dp, zero1, zero2 or zero3" "${exe[@]}" --set shard=zero4
# Resuming a finished run: the summary is valid JSON (no inf).
"${exe[@]}" --quiet --save "$tmp/done.ckpt" > /dev/null 2>&1 || { echo "FAIL: cannot save"; fail=1; }
"${exe[@]}" --quiet --resume "$tmp/done.ckpt" --metrics "$tmp/m.json" > /dev/null 2>&1
check "summary after resuming a finished run" 0 '"timed_samples_per_s": 0.0' \
  python3 -c "import json,sys; [json.loads(l, parse_constant=lambda c: sys.exit('not JSON: ' + c)) for l in open(sys.argv[1])]; print(open(sys.argv[1]).read())" "$tmp/m.json"
exit $fail
