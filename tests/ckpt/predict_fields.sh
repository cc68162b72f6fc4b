#!/usr/bin/env bash
# --predict on a model that declares its outputs (output NAME = EXPR) and
# has no classifier: one .npy of records whose header names every output
# with its dtype and per-sample shape (predict_fields.kl: code f32[8],
# recon f32[28,28], brightness f32, bright i32, pixels u8[784]). Checked
# here without NumPy: the exact header; each record against the others
# (brightness is the mean of the pixels / 255, bright its > 0.5, recon
# the decoder's forward pass of code with the exported weights); the mean
# squared error of recon against the pixels is the evaluation's loss.
# Misuse: an output without a row per sample, a misspelt statement.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
"$kiln" build "$testdir/ckpt/predict_fields.kl" -o enc > /dev/null || { bad "kiln build"; exit 1; }
./enc --threads 1 --quiet --save e.ckpt --export e.safetensors > /dev/null || { bad "training"; exit 1; }
./enc --threads 1 --eval-only --resume e.ckpt --predict p.npy > e.out 2> e.err || { bad "--predict"; cat e.err; exit 1; }
loss=$(sed -n 's/^eval  loss \([0-9.]*\).*/\1/p' e.out)
python3 - p.npy e.safetensors "$loss" <<'PY' && ok "--predict wrote the 5 declared outputs (header, records, loss $loss)" || bad "--predict's declared outputs"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
assert raw[:8] == b"\x93NUMPY\x01\x00", raw[:8]
(hl,) = struct.unpack_from("<H", raw, 8)
assert (10 + hl) % 64 == 0
hdr = raw[10:10 + hl].decode().rstrip()
want = ("{'descr': [('code', '<f4', (8,)), ('recon', '<f4', (28, 28,)), ('brightness', '<f4'), ('bright', '<i4'), "
        "('pixels', '|u1', (784,))], 'fortran_order': False, 'shape': (43,), }")
assert hdr == want, hdr
rec = 4 * 8 + 4 * 784 + 4 + 4 + 784
assert len(raw) == 10 + hl + 43 * rec, (len(raw), rec)
st = open(sys.argv[2], "rb").read()
(n,) = struct.unpack_from("<Q", st, 0)
meta = json.loads(st[8:8 + n])
def tensor(name):
    a, b = meta[name]["data_offsets"]
    return struct.unpack_from("<%df" % ((b - a) // 4), st, 8 + n + a)
w2, b2 = tensor("dense.2.w"), tensor("dense.2.b")
sq, worst = 0.0, 0.0
for i in range(43):
    o = 10 + hl + i * rec
    code = struct.unpack_from("<8f", raw, o)
    recon = struct.unpack_from("<784f", raw, o + 32)
    (bness,) = struct.unpack_from("<f", raw, o + 32 + 3136)
    (bright,) = struct.unpack_from("<i", raw, o + 36 + 3136)
    px = raw[o + 40 + 3136:o + 40 + 3136 + 784]
    assert abs(bness - sum(px) / 255.0 / 784) < 1e-5, (i, bness)
    assert bright == (1 if bness > 0.5 else 0), (i, bright, bness)
    for j in range(784):
        ref = sum(code[k] * w2[k * 784 + j] for k in range(8)) + b2[j]
        worst = max(worst, abs(ref - recon[j]))
        sq += (recon[j] - px[j] / 255.0) ** 2
assert worst < 1e-4, "recon differs from code @ w + b by %g" % worst
mse = sq / (43 * 784)
assert abs(mse - float(sys.argv[3])) <= 1e-4 * max(1.0, mse), "mse %g, eval loss %s" % (mse, sys.argv[3])
print("recon within %.2g of the decoder, mse %.4f" % (worst, mse))
PY
# An output that is no per-sample value: refused, naming it.
sed 's/^  output pixels = flatten(image)$/  output total = sum(flatten(x), axis = [0])/' "$testdir/ckpt/predict_fields.kl" > sum.kl
"$kiln" build sum.kl -o sum > /dev/null && ./sum --threads 1 --quiet --save s.ckpt > /dev/null || bad "build and train sum.kl"
expect_error "an output without a row per sample" "--predict: output 'total' is f32[784...]: its first dimension is not the batch (43)" \
  ./sum --threads 1 --eval-only --resume s.ckpt --predict s.npy
[ ! -e s.npy ] && ok "nothing written" || bad "s.npy written"
# A statement of two names that is not output.
sed 's/^  output code =/  outptu code =/' "$testdir/ckpt/predict_fields.kl" > typo.kl
expect_error "a misspelt output" "'outptu code = ...' is no statement (an output is 'output code = ...')" "$kiln" ir typo.kl
exit $fail
