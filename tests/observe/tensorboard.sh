#!/usr/bin/env bash
# --tensorboard DIR (and the train key tensorboard = "DIR"): event files
# read back by the real tensorboard package's own reader (installed from
# PyPI into the build folder by this script; the test is skipped, exit 77,
# only when PyPI cannot be reached):
#  - every record passes the reader's CRC32C checks (a corrupted copy does
#    not), the first event is the file version;
#  - the tags are exactly the documented ones; each progress line's
#    scalars (loss, accuracy, lr, loss scale, skipped steps, samples/s,
#    ms/step, data wait, memory, CPU utilisation) equal the --metrics
#    record of the same step, and each evaluation's scalars its record;
#  - the train key writes the same way; a folder that cannot be made and a
#    key that is not a path are errors.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
build=$2
pip_deps "$build/pydeps" tensorboard.backend.event_processing.event_file_loader tensorboard
enter_tmpdir
build_example mlp

# 600 samples at batch 128: 4 steps an epoch; 9 steps, a line every 2.
./mlp --data synthetic:600 --threads 1 --steps 9 --log-every 2 --metrics m.jsonl --tensorboard runs/a --quiet > out 2>&1 ||
  { bad "run failed"; cat out; }
cat > check.py <<'PY'
import glob, json, math, sys
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
folder, metrics = sys.argv[1], sys.argv[2]
files = glob.glob(folder + "/events.out.tfevents.*")
errs = []
if len(files) != 1:
    print("  %d event files in %s" % (len(files), folder)); sys.exit(1)
events = list(EventFileLoader(files[0]).Load())
raw = open(files[0], "rb").read()
# Records: 8 length, 4 CRC, data, 4 CRC. The reader stops at a bad CRC,
# so it must have read every record in the file.
n, off = 0, 0
while off < len(raw):
    off += 16 + int.from_bytes(raw[off:off + 8], "little")
    n += 1
if off != len(raw) or len(events) != n:
    errs.append("the reader read %d events of the file's %d records" % (len(events), n))
if not events or events[0].file_version != "brain.Event:2":
    errs.append("first event is not the file version")
scal = {}
for ev in events[1:]:
    for v in ev.summary.value:
        x = v.tensor.float_val[0] if v.HasField("tensor") else v.simple_value
        scal.setdefault(v.tag, {})[ev.step] = x
want_tags = {"train/loss", "train/accuracy", "train/lr", "train/loss_scale", "train/skipped_steps",
             "perf/samples_per_s", "perf/ms_per_step", "perf/data_wait_s", "memory/plan_peak_mb",
             "memory/host_rss_mb", "host/cpu_percent", "eval/loss", "eval/accuracy"}
if set(scal) != want_tags:
    errs.append("tags %s, expected %s" % (sorted(scal), sorted(want_tags)))
recs = [json.loads(l) for l in open(metrics)]
pairs = {"train/loss": "loss", "train/accuracy": "accuracy", "train/lr": "lr", "train/loss_scale": "loss_scale",
         "train/skipped_steps": "skipped", "perf/samples_per_s": "samples_per_s", "perf/ms_per_step": "ms_per_step",
         "perf/data_wait_s": "data_wait_s", "host/cpu_percent": "cpu_percent"}
# float32 in the event file against the record's printed digits: %.6g,
# or a fixed number of decimals for these.
decimals = {"ms_per_step": 3, "samples_per_s": 1, "cpu_percent": 1, "data_wait_s": 4}
def close(a, b, key):
    tol = 0.5 * 10.0 ** -decimals[key] if key in decimals else 5e-6 * abs(b)
    return abs(a - b) <= tol + 1e-7 * abs(b) + 1e-12
train = [r for r in recs if r["type"] == "train"]
evals = [r for r in recs if r["type"] == "eval"]
for tag, key in pairs.items():
    steps = sorted(scal.get(tag, {}))
    if steps != [r["step"] for r in train]:
        errs.append("%s at steps %s, progress records at %s" % (tag, steps, [r["step"] for r in train]))
        continue
    for r in train:
        if not close(scal[tag][r["step"]], r[key], key):
            errs.append("%s at step %d: %r, the record says %r" % (tag, r["step"], scal[tag][r["step"]], r[key]))
for r in train:
    if abs(scal["memory/host_rss_mb"][r["step"]] - r["rss_bytes"] / 1e6) > 1e-3 * r["rss_bytes"] / 1e6:
        errs.append("rss at step %d" % r["step"])
    if not scal["memory/plan_peak_mb"][r["step"]] > 0:
        errs.append("plan peak not positive")
for tag, key in (("eval/loss", "loss"), ("eval/accuracy", "accuracy")):
    if sorted(scal.get(tag, {})) != [r["step"] for r in evals]:
        errs.append("%s at steps %s, eval records at %s" % (tag, sorted(scal.get(tag, {})), [r["step"] for r in evals]))
        continue
    for r in evals:
        if not close(scal[tag][r["step"]], r[key], key):
            errs.append("%s at step %d: %r, the record says %r" % (tag, r["step"], scal[tag][r["step"]], r[key]))
for e in errs:
    print("  " + e)
if not errs:
    print("  %d events; %d progress lines and %d evaluations match --metrics" % (len(events), len(train), len(evals)))
sys.exit(1 if errs else 0)
PY
python3 check.py runs/a m.jsonl && ok "tensorboard's reader reads the run; tags, steps and values match --metrics" || bad "event file (see above)"

# The reader does check the CRCs: flip one byte of a record's data.
python3 - runs/a <<'PY' && ok "a corrupted copy stops the reader (its CRC check is live)" || bad "corrupted copy read whole"
import glob, sys
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
f = glob.glob(sys.argv[1] + "/events.out.tfevents.*")[0]
b = bytearray(open(f, "rb").read())
whole = len(list(EventFileLoader(f).Load()))
first = 16 + int.from_bytes(b[0:8], "little")
b[first + 12 + 3] ^= 0x40
open("corrupt.tfevents", "wb").write(b)
sys.exit(0 if len(list(EventFileLoader("corrupt.tfevents").Load())) < whole else 1)
PY

# The train key, through a model file and through --set.
sed 's|^  seed      = 1$|  seed      = 1\n  tensorboard = "runs/key"|' "$testdir/../examples/mlp.kl" > keyed.kl
grep -q 'tensorboard = "runs/key"' keyed.kl || bad "could not add the key to the model file"
"$kiln" build keyed.kl -o keyed > /dev/null || bad "kiln build keyed.kl"
./keyed --data synthetic:600 --threads 1 --steps 9 --log-every 2 --metrics k.jsonl --quiet > out 2>&1 || { bad "keyed run"; cat out; }
python3 check.py runs/key k.jsonl > /dev/null && ok "train key tensorboard = \"runs/key\" writes the same scalars" || bad "train key"
./mlp --data synthetic:600 --threads 1 --steps 2 --set tensorboard=runs/set --quiet > out 2>&1 && ls runs/set/events.out.tfevents.* > /dev/null 2>&1 &&
  ok "--set tensorboard=runs/set" || bad "--set tensorboard"

# Errors.
echo x > plainfile
./mlp --data synthetic:600 --steps 1 --tensorboard plainfile/sub > out 2>&1; rc=$?
[ $rc != 0 ] && grep -qF "kiln: error: --tensorboard: cannot make the folder plainfile/sub:" out && ok "unmakeable folder: $(cat out | grep error)" ||
  { bad "unmakeable folder: rc $rc"; cat out; }
sed 's|^  seed      = 1$|  seed      = 1\n  tensorboard = 3|' "$testdir/../examples/mlp.kl" > badkey.kl
"$kiln" build badkey.kl -o badkey > out 2>&1; rc=$?
[ $rc != 0 ] && grep -qE "badkey.kl:[0-9]+:[0-9]+: .*tensorboard must be a path in quotes" out && ok "tensorboard = 3: $(grep tensorboard out)" ||
  { bad "tensorboard = 3: rc $rc"; cat out; }
exit $fail
