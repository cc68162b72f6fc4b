#!/usr/bin/env bash
# Host readings of a training run (runtime/observe/monitor.c, hostmetrics.c):
#  - the trace gets counter tracks ("host CPU %", "host RSS MB") from the
#    monitor thread, in time order inside the run;
#  - the summary line and record give the run's CPU utilisation and the
#    resident set's high-water mark, which is at least every resident size
#    the run recorded and at least the memory plan's peak (params, state
#    and the arena, all touched by training);
#  - on the CPU: no GPU fields and no NVML notice.
# Values are related to each other, never to how fast anything ran.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
build_example mlp
# Long enough for several samples (one every 0.25 s) on any machine.
./mlp --data synthetic:6000 --threads 1 --steps 600 --log-every 100 --eval-every 0 --trace t.json --metrics m.jsonl > out 2> err ||
  { bad "run failed"; cat out err; }
grep -E "^(memory plan|done|host):" out
python3 - t.json m.jsonl out <<'PY' && ok "counter tracks, summary line and record agree" || bad "host readings (see above)"
import json, re, sys
trace = json.load(open(sys.argv[1]))
recs = [json.loads(l) for l in open(sys.argv[2])]
text = open(sys.argv[3]).read()
summ = [r for r in recs if r["type"] == "summary"][-1]
train = [r for r in recs if r["type"] == "train"]
errs = []
counters = {}
for e in trace:
    if e.get("ph") == "C":
        counters.setdefault(e["name"], []).append((e["ts"], e["args"]["value"]))
steps = [e for e in trace if e.get("ph") == "X" and e.get("cat") == "step"]
if set(counters) != {"host CPU %", "host RSS MB"}:
    errs.append("counter tracks %s" % sorted(counters))
elif summ["seconds"] >= 1.0 and len(counters["host RSS MB"]) < 1:
    errs.append("a %.1f s run has no samples" % summ["seconds"])
peak_mb = summ["host_rss_peak_bytes"] / 1e6
first = min(e["ts"] for e in steps) if steps else 0
for name, pts in counters.items():
    ts = [p[0] for p in pts]
    if ts != sorted(ts):
        errs.append("%s: samples out of order" % name)
    if ts and (ts[0] < first - 1e6 or ts[-1] > max(e["ts"] + e["dur"] for e in steps) + 1e6):
        errs.append("%s: samples outside the run" % name)
for ts, v in counters.get("host RSS MB", []):
    if not 0 < v <= peak_mb + 1e-3:
        errs.append("RSS sample %.3f MB outside (0, peak %.3f MB]" % (v, peak_mb))
for ts, v in counters.get("host CPU %", []):
    if v < 0:
        errs.append("CPU sample %.1f%% negative" % v)
for r in train:
    if r["rss_bytes"] > summ["host_rss_peak_bytes"]:
        errs.append("step %d: resident %d bytes above the peak %d" % (r["step"], r["rss_bytes"], summ["host_rss_peak_bytes"]))
m = re.search(r"peak ([0-9.]+) MB with params and state", text)
if not m or summ["host_rss_peak_bytes"] / 1e6 < float(m.group(1)):
    errs.append("peak resident memory %.2f MB below the plan's peak %s MB" % (peak_mb, m and m.group(1)))
m = re.search(r"^host: CPU ([0-9]+)% of one core over the run, peak resident memory ([0-9.]+) MB$", text, re.M)
if not m:
    errs.append("no host: summary line")
elif abs(int(m.group(1)) - summ["host_cpu_percent"]) > 0.51 or abs(float(m.group(2)) - peak_mb) > 0.051:
    errs.append("summary line %s, record %.1f%% %.2f MB" % (m.group(0), summ["host_cpu_percent"], peak_mb))
if any(k.startswith("gpu_") for r in recs for k in r):
    errs.append("GPU fields on a CPU run")
for e in errs:
    print("  " + e)
sys.exit(1 if errs else 0)
PY
grep -q NVML err && bad "NVML notice on a CPU run: $(grep NVML err)" || ok "no NVML notice on a CPU run"
exit $fail
