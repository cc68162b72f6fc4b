#!/usr/bin/env bash
# --predict on models without a cross-entropy writes the model's output
# (the value the loss compares with a target) as an f32 .npy of shape
# (samples, ...): a linear regression with mse loss, checked against its
# forward pass computed here from the exported weights and the IDX test
# images, and its mean squared error against the evaluation's loss; an
# autoencoder's [batch, 28, 28] output gives shape (samples, 28, 28).
# (--predict once refused both: "no cross_entropy".)
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
"$kiln" build "$testdir/ckpt/predict_outputs.kl" -o reg > /dev/null || { bad "kiln build"; exit 1; }
./reg --threads 1 --quiet --save r.ckpt --export r.safetensors > /dev/null || { bad "training"; exit 1; }
./reg --threads 1 --eval-only --resume r.ckpt --predict p.npy > e.out 2> e.err || { bad "--predict"; cat e.err; exit 1; }
loss=$(sed -n 's/^eval  loss \([0-9.]*\).*/\1/p' e.out)
python3 - p.npy r.safetensors "$loss" <<'PY' && ok "--predict wrote the regression's outputs (shape, forward pass, loss $loss)" || bad "--predict's outputs"
import gzip, json, struct, sys
raw = open(sys.argv[1], "rb").read()
(hl,) = struct.unpack_from("<H", raw, 8)
hdr = raw[10:10 + hl].decode()
assert "'descr': '<f4'" in hdr and "'shape': (10000, 1,)" in hdr, hdr
out = struct.unpack_from("<10000f", raw, 10 + hl)
st = open(sys.argv[2], "rb").read()
(n,) = struct.unpack_from("<Q", st, 0)
meta = json.loads(st[8:8 + n])
def tensor(name):
    a, b = meta[name]["data_offsets"]
    return struct.unpack_from("<%df" % ((b - a) // 4), st, 8 + n + a)
w, b = tensor("w"), tensor("b")
img = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:]
lab = gzip.open("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz").read()[8:]
worst = 0.0
for i in range(300):
    px = img[i * 784:(i + 1) * 784]
    ref = sum(px[k] / 255.0 * w[k] for k in range(784)) + b[0]
    worst = max(worst, abs(ref - out[i]))
assert worst < 1e-4, "row differs from the forward pass by %g" % worst
mse = sum((out[i] - lab[i]) ** 2 for i in range(10000)) / 10000
assert abs(mse - float(sys.argv[3])) <= 1e-4 * max(1.0, mse), "mse %g, eval loss %s" % (mse, sys.argv[3])
print("forward pass within %.2g, mse %.4f" % (worst, mse))
PY
# An autoencoder: the output keeps its per-sample dims.
"$kiln" build "$testdir/language/no_label.kl" -o ae > /dev/null || { bad "kiln build ae"; exit 1; }
./ae --threads 1 --quiet --save a.ckpt > /dev/null || bad "ae training"
./ae --threads 1 --eval-only --resume a.ckpt --predict a.npy > /dev/null 2> a.err || { bad "ae --predict"; cat a.err; }
python3 - a.npy <<'PY' && ok "the autoencoder's output: shape (43, 28, 28)" || bad "the autoencoder's --predict"
import struct, sys
raw = open(sys.argv[1], "rb").read()
(hl,) = struct.unpack_from("<H", raw, 8)
hdr = raw[10:10 + hl].decode()
assert "'shape': (43, 28, 28,)" in hdr, hdr
assert len(raw) == 10 + hl + 4 * 43 * 28 * 28, len(raw)
PY
# A loss that compares no per-sample output with a target (x @ w's w is
# no output): refused, saying what --predict looks for.
cat > none.kl <<'KL'
model z {
  input image : u8[batch, 1, 28, 28]
  param w : [784, 1] init = normal(std = 0.01)
  loss = mean(f32(flatten(image)) @ w) * 0 + sum(w * w)
}
train {
  data = synthetic(samples = 64)
  batch = 16
  steps = 1
}
KL
"$kiln" build none.kl -o none > /dev/null && ./none --threads 1 --quiet --save z.ckpt > /dev/null || bad "build and train none.kl"
out=$(./none --threads 1 --eval-only --resume z.ckpt --predict z.npy 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qF "its loss compares no output with a target" <<< "$out" && [ ! -e z.npy ] &&
  ok "no output to write: refused" || { bad "no output: exit $rc"; echo "$out" | head -3; }
exit $fail
