#!/usr/bin/env bash
# --predict on shard data (kiln pack --idx, whose labels are .cls i64):
# the label column is the value the cross-entropy reads, so the share of
# rows with pred == label is the evaluation's accuracy (it once read the
# sample's second field as int32, whatever it was: 0.111 for 0.746).
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
"$kiln" pack --idx /usr/share/datasets/fashion-mnist -o pk --limit 1000 > /dev/null 2>&1 || { bad "kiln pack"; exit 1; }
sed 's#data      = idx("/usr/share/datasets/fashion-mnist")#data      = shards("pk/train-000000.tar", test = "pk/test-000000.tar")#' \
  "$testdir/../examples/mlp.kl" > m.kl
grep -q 'shards("pk' m.kl || { bad "the example's data line changed"; exit 1; }
"$kiln" build m.kl -o m > /dev/null || { bad "kiln build"; exit 1; }
./m --threads 1 --steps 30 --quiet --save m.ckpt > /dev/null 2>&1 || bad "training"
./m --threads 1 --eval-only --resume m.ckpt --predict p.npy --metrics e.json > e.out 2> e.err || { bad "--eval-only"; cat e.err; }
acc=$(grep -o '"accuracy": [^,}]*' e.json | sed 's/.*: //')
got=$(python3 - p.npy <<'PY'
import struct, sys
raw = open(sys.argv[1], "rb").read()
(hl,) = struct.unpack_from("<H", raw, 8)
hdr = raw[10:10 + hl].decode()
classes = int(hdr.split("'<f4', (")[1].split(",")[0])
n = int(hdr.split("'shape': (")[1].split(",")[0])
rec, off, hit = 8 + 4 * classes, 10 + hl, 0
labels = set()
for i in range(n):
    pred, label = struct.unpack_from("<ii", raw, off + i * rec)
    hit += pred == label
    labels.add(label)
assert labels <= set(range(classes)), "labels outside the classes: %s" % sorted(labels)[:5]
print("%.6g" % (hit / n))
PY
)
[ -n "$acc" ] && [ "$got" = "$acc" ] && ok "mean(pred == label) $got = the evaluation's accuracy $acc" ||
  bad "mean(pred == label) '$got', the evaluation's accuracy '$acc'"
exit $fail
