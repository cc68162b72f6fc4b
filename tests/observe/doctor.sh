#!/usr/bin/env bash
# kiln doctor on this machine (the verdict rules themselves are unit.doctor):
#  - --json parses; cores and ISA flags agree with what Python reads from
#    sysfs and /proc/cpuinfo; OpenBLAS's core is named; cuDNN "not used";
#  - without a CUDA driver: a note saying so, and exit status 0 (CPU use fits);
#  - a C compiler that does not run: a problem naming it, exit status 1;
#  - an unknown option: an error, exit status 2.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
new_tmpdir

"$kiln" doctor --json > "$tmp/d.json"; rc=$?
"$kiln" doctor > "$tmp/d.txt"; rc_text=$?
cat "$tmp/d.txt"
python3 - "$tmp/d.json" "$rc" "$rc_text" <<'PY' && ok "doctor --json agrees with sysfs and /proc/cpuinfo; exit status matches 'fits'" || bad "doctor --json (see above)"
import json, os, sys
d = json.load(open(sys.argv[1]))
rc, rc_text = int(sys.argv[2]), int(sys.argv[3])
errs = []
cores = set()
for cpu in range(os.cpu_count()):
    p = "/sys/devices/system/cpu/cpu%d/topology/" % cpu
    try:
        cores.add((open(p + "physical_package_id").read().strip(), open(p + "core_id").read().strip()))
    except OSError:
        pass
if cores and d["cpu"]["physical_cores"] != len(cores):
    errs.append("physical cores %d, sysfs says %d" % (d["cpu"]["physical_cores"], len(cores)))
flags = set()
for line in open("/proc/cpuinfo"):
    if line.startswith("flags"):
        flags = set(line.split(":", 1)[1].split())
        break
for key, flag in (("avx2", "avx2"), ("avx512f", "avx512f"), ("avx512_bf16", "avx512_bf16"), ("amx", "amx_tile")):
    if d["cpu"][key] != (flag in flags):
        errs.append("%s: doctor %s, /proc/cpuinfo %s" % (key, d["cpu"][key], flag in flags))
if not d["openblas"]["core"] or d["openblas"]["threads"] < 1:
    errs.append("openblas %r" % d["openblas"])
if d["cudnn"] != "not used":
    errs.append("cudnn %r" % d["cudnn"])
if not d["verdicts"]:
    errs.append("no verdicts")
if rc != (0 if d["fits"] else 1) or rc_text != rc:
    errs.append("exit status %d (text %d) with fits %s" % (rc, rc_text, d["fits"]))
if d["driver"] is None:
    if not any(v["level"] == "note" and v["text"].startswith("no CUDA driver") for v in d["verdicts"]):
        errs.append("no driver, but no note saying so")
    if not d["fits"] and not any(v["level"] == "problem" for v in d["verdicts"]):
        errs.append("does not fit without a problem")
for e in errs:
    print("  " + e)
sys.exit(1 if errs else 0)
PY
if [ ! -e /dev/nvidia0 ] && [ "$rc" != 0 ]; then
  bad "no GPU here, yet exit status $rc"
fi

KILN_CC=/nonexistent/cc "$kiln" doctor > "$tmp/cc.txt"; rc=$?
if [ "$rc" = 1 ] && grep -qF "problem  no working C compiler (/nonexistent/cc:" "$tmp/cc.txt"; then
  ok "a missing compiler: $(grep -F 'no working C compiler' "$tmp/cc.txt" | cut -c1-100)..."
else
  bad "KILN_CC=/nonexistent/cc: exit status $rc"; cat "$tmp/cc.txt"
fi

# The training executable's start-up line: the same facts in one line;
# --quiet hides it.
( cd "$tmp" && "$kiln" build "$testdir/../examples/mlp.kl" -o mlp > /dev/null ) || bad "kiln build failed"
line=$("$tmp/mlp" --data synthetic:300 --steps 1 --eval-every 0 2> /dev/null | head -1)
want=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
isa = "".join(" " + n for k, n in (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX512-BF16"), ("amx", "AMX")) if d["cpu"][k])
drv = "CUDA driver %s" % d["driver"]["cuda"] if d["driver"] else "no CUDA driver"
nv = ", NVRTC %s" % d["nvrtc"]["version"] if d["nvrtc"] and d["gpus"] else ""
print("kiln %s: %s; %d cores%s; OpenBLAS %s; %s%s" % (d["kiln"], d["os"], d["cpu"]["physical_cores"], isa, d["openblas"]["core"], drv, nv))
' "$tmp/d.json")
case $line in
  "$want"*) ok "start-up line: $line" ;;
  *) bad "start-up line '$line', expected it to start with '$want'" ;;
esac
line=$("$tmp/mlp" --data synthetic:300 --steps 1 --eval-every 0 --device cpu 2> /dev/null | head -1)
case $line in
  *"; GPU not probed") ok "--device cpu: $line" ;;
  *) bad "--device cpu start-up line '$line'" ;;
esac
"$tmp/mlp" --data synthetic:300 --steps 1 --eval-every 0 --quiet 2> /dev/null | grep -qF "kiln $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kiln"])' "$tmp/d.json"):" &&
  bad "--quiet still prints the start-up line" || ok "--quiet hides the start-up line"

"$kiln" doctor --bogus > "$tmp/o" 2>&1; rc=$?
[ "$rc" = 2 ] && grep -qF "kiln doctor: unknown option --bogus" "$tmp/o" && ok "unknown option refused" || { bad "--bogus: $rc"; cat "$tmp/o"; }
exit $fail
