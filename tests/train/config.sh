#!/usr/bin/env bash
# --config FILE: a run's flags as "key = value" lines (train settings and
# flags' names), the command line's flags winning; the settings recorded
# in the checkpoint's header (kiln ckpt prints them) and in the metrics
# file's first record, and a run reproduces from either (the same
# losses, step by step); unknown keys and bad values refused naming the
# file and the line. tiny.kl: 256 samples.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
enter_tmpdir
"$kiln" build "$testdir/train/tiny.kl" -o tiny > /dev/null 2>&1 || { echo "FAIL: kiln build tiny.kl"; exit 1; }
cat > run.cfg <<'CFG'
# the train block's syntax, with comments
epochs = 2
batch = 32                                   # 8 steps an epoch
optimizer = sgd(lr = 0.01, momentum = 0.9)
save = "a.ckpt"
save_every = 4
log_every = 1
metrics = a.json
quiet = true
CFG
./tiny --config run.cfg --epochs 1 > a.txt
# batch 32: 8 steps; --epochs 1 wins over the file's 2; quiet; save_every 4.
grep -q '^done: 8 steps' a.txt && ok "the file's batch, the command line's epochs: 8 steps" || { cat a.txt; bad "steps"; }
! grep -q ' step ' a.txt && ok "quiet = true" || bad "quiet = true not applied"
[ -e a.ckpt.step-4 ] && [ -e a.ckpt.step-8 ] && ok "save_every = 4" || bad "no periodic checkpoints"
python3 - <<'PY' || fail=1
import json
recs = [json.loads(l) for l in open("a.json")]
c = recs[0]
assert c["type"] == "config" and c["file"] == "run.cfg", c
s = c["settings"]
assert s["batch"] == "32" and s["epochs"] == "1" and s["optimizer"] == "sgd(lr = 0.01, momentum = 0.9)", s
assert "# on the command line\nepochs = 1\n" in c["text"], c["text"]
print("ok: the metrics file's config record: settings in effect and the text")
PY
"$kiln" ckpt a.ckpt > show.txt
grep -qx '  batch = 32' show.txt && grep -qx '  # on the command line' show.txt && grep -qx '  epochs = 1' show.txt &&
  ok "kiln ckpt prints the config" || { cat show.txt; bad "kiln ckpt's config"; }

# Reproduced from the checkpoint's header and from the metrics record:
# the same loss at every step (new file names on the command line).
sed -n '/^config:$/,/^step:/p' show.txt | sed '1d;$d;s/^  //' > from_ckpt.cfg
python3 -c 'import json; open("from_metrics.cfg", "w").write(json.loads(open("a.json").readline())["text"])'
for f in from_ckpt from_metrics; do
  ./tiny --config $f.cfg --save $f.ckpt --metrics $f.json > /dev/null
  python3 - $f <<'PY' || fail=1
import json, sys
loss = lambda p: [(r["step"], r["loss"]) for r in map(json.loads, open(p)) if r["type"] == "train"]
a, b = loss("a.json"), loss(sys.argv[1] + ".json")
assert len(a) == 8 and a == b, (a, b)
print(f"ok: reproduced from {sys.argv[1].replace('from_', 'the ')}: the same 8 losses")
PY
done
# Without --config nothing is recorded.
./tiny --steps 1 --quiet --save plain.ckpt > /dev/null
"$kiln" ckpt plain.ckpt | grep -qx 'config: none (no --config)' && ok "no config: none recorded" || bad "plain run's config line"

# Refusals name the file and the line.
refuse() { # NAME FILE-TEXT EXPECTED
  printf '%b' "$2" > bad.cfg
  if ./tiny --config bad.cfg > out.txt 2>&1; then bad "$1: accepted"; return; fi
  grep -qF -- "$3" out.txt && ok "$1: $(head -1 out.txt)" || { cat out.txt; bad "$1: expected '$3'"; }
}
refuse "unknown key" 'batch = 32\nbach = 3\n' "bad.cfg:2:1: error: unknown key 'bach'"
refuse "bad train value" 'epochs = 1\nbatch = abc\n' "bad.cfg:2:1: error: batch must be an integer of at least 1"
refuse "bad flag value" 'progress = fancy\n' "bad.cfg:1:1: error: --progress must be auto, bar, lines or none, got 'fancy'"
refuse "bad value in a train block" 'train {\n  batch = 32\n  save_every = x\n}\n' "bad.cfg:3:3: error: --save-every needs a positive count, got 'x'"
refuse "not key = value" 'just words\n' "bad.cfg:1:1: error: expected KEY = VALUE"
refuse "config in a config" 'config = other.cfg\n' "bad.cfg:1:1: error: 'config' cannot be set in a config file"
refuse "a bad lr" 'epochs = 1\nlr = abc\n' "bad.cfg:2:1: error: --set lr: 'abc' is not a positive number"
refuse "a NUL byte" 'epochs = 1\n\0\001garbage\n' "bad.cfg:2: a NUL byte: a config file is text"
if ./tiny --config missing.cfg > out.txt 2>&1; then bad "a missing file accepted"; fi
grep -q 'missing.cfg: cannot open' out.txt && ok "a missing file: $(head -1 out.txt)" || bad "missing file: $(cat out.txt)"
exit $fail
