#!/usr/bin/env bash
# kiln plan (docs/guides/plan.md) on tests/plan/tiny.kl, whose GEMMs are
# known by hand (2 x 16 x 784 x 10 FLOPs each, forward and the gradient
# of w), on tests/plan/h.cluster, whose numbers make the arithmetic exact
# (GEMMs at 0.5e12 FLOP/s, kernels' bytes at 750 TB/s, no launch or host
# cost, a 1 GB/s link with 10 us a step):
#   arith    the cost model's roofline and alpha-beta arithmetic for dp on
#            2 ranks, micro-batch 16: compute 2 x 250,880 / 0.5e12 s, the
#            gradients' all-reduce (31,360 bytes, a ring of 2: 2 x 10 us
#            + 31,360 / 1e9 s, exposed: the update waits for it), the
#            step their sum, MFU, bytes per link; --json parses
#   stages   the examples' CNN on 4 CPU ranks, P = 2 with every schedule
#            and dp, zero1-3 inside the stages: a finite prediction each
#            (tests/plan/cpu4.cluster: the CPU's numbers fixed, not measured)
#   memory   on one rank with 120 kB a rank: the memory per rank the plan
#            prints is the training executable's peak ("peak X MB with
#            params and state"); the layout it drops for memory is refused
#            by the executable with --memory-limit for the same reason,
#            and one it keeps trains under the same limit
#   errors   bad flags and cluster files: a clear error, non-zero exit
#   zero     the memory per rank against ZeRO's formulas (Rajbhandari
#            et al. 2020, section 5: mixed-precision Adam holds 2 Psi of
#            params, 2 Psi of gradients and K Psi of state, K = 12; stage
#            1 divides the state by N, stage 2 the gradients too, stage 3
#            everything), for the paper's example of Psi = 7.5e9 on N = 64
#            (tests/plan/psi75.kl on 8 nodes of a100x8): the formula rows
#            kiln plan prints are 120 GB, 31.4 GB, 16.6 GB and 1.88 GB
#            to the byte (16 Psi, 4 Psi + 12 Psi / N, 2 Psi + 14 Psi / N,
#            16 Psi / N), and the plan's own params, gradients and state
#            per rank at fp32 (4 + 4 + 8 bytes a param) equal them for dp
#            and zero3 and Kiln's bytes' formula (fp32 params and
#            gradients whole under zero1, params under zero2) for the
#            others
#   trains   examples/mlp.kl on 2 CPU ranks (synthetic data, fp32, micro-
#            batches 2 and 8 of a global batch of 16, under a memory
#            limit halfway between the smallest and the largest layout):
#            every layout kiln plan keeps (data parallel dp / zero1 /
#            zero2 / zero3, pipeline stages gpipe / 1f1b / zero_bubble)
#            trains 2 steps with the command line it prints (whose
#            --plan-predict puts the prediction beside the measured step
#            in the summary), and every
#            layout it drops for memory is refused by the training
#            executable at start-up for the same bytes
#
#   plan.sh KILN CASE
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
case_=$2
new_tmpdir
model=$testdir/plan/tiny.kl
cluster=$testdir/plan/h.cluster

case $case_ in
arith)
  "$kiln" plan "$model" --cluster "$cluster" --global-batch 32 --precision fp32 --json > "$tmp/p.json"
  python3 - "$tmp/p.json" << 'EOF' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
L = [l for l in d["layouts"] if l["shard"] == "dp" and l["D"] == 2 and l["micro"] == 16 and l["fits"]]
assert len(L) == 1, "one dp layout of micro-batch 16 on 2 ranks"
l = L[0]
gemm = 2 * 16 * 784 * 10                    # FLOPs of one of the two GEMMs
compute = 2 * gemm / 0.5e12                 # both, at peak x eff_gemm
S = 784 * 10 * 4                            # the gradient of w, f32
ring = 2 * (2 - 1) * 10e-6 + 2 * (2 - 1) / 2 * S / 1e9
bad = []
def near(name, got, want, tol):
    if abs(got - want) > tol:
        bad.append(f"{name}: {got!r}, by hand {want!r}")
near("flops per rank", l["flops"], 2 * gemm, 0.5)
near("useful flops", l["useful_flops"], 2 * 2 * gemm, 0.5)
near("compute_s", l["compute_s"], compute, 1e-12)
near("intra_bytes", l["intra_bytes"], S, 0.5)
near("exposed_intra_s", l["exposed_intra_s"], ring, 1e-12)
# The kernels' bytes at 750 TB/s add well under a nanosecond.
near("step_s", l["step_s"], compute + ring, 1e-9)
near("mfu", l["mfu"], 2 * 2 * gemm / (l["step_s"] * 2 * 1e12), 1e-9)
assert l["bound"] == "intra-node", l["bound"]
assert l["bubble"] == 0
for b in bad:
    print("FAIL:", b)
if bad:
    sys.exit(1)
print(f"ok: dp 16 x 1 on 2 ranks: compute {l['compute_s']:.6g} s, all-reduce {l['exposed_intra_s']:.6g} s, "
      f"step {l['step_s']:.6g} s, MFU {l['mfu']:.4f}: the hand-computed values")
EOF
  # The table and its command lines.
  "$kiln" plan "$model" --cluster "$cluster" --global-batch 32 --precision fp32 > "$tmp/p.txt"
  grep -q "mpirun -np 2 ./tiny --batch 16 --accumulate 1 --precision fp32 --shard " "$tmp/p.txt" &&
    grep -q "memory-limit 1000000 --plan-predict 0.05[0-9]*$" "$tmp/p.txt" && ok "the command lines of the best layouts" ||
    { bad "no command line"; cat "$tmp/p.txt"; }
  ;;
stages)
  # Pipeline layouts on CPU ranks, every schedule, with ZeRO inside the
  # stages: each gets a finite prediction (interleaved's 4 stages on 2
  # ranks once read a link past the cut table: -nan, which is not JSON),
  # and interleaved's critical path is below 1f1b's (half the fill).
  # tests/plan/cpu4.cluster fixes the numbers cpux4 measures: with them
  # measured, a loaded machine's slower copies (the links) once made
  # interleaved's twice as many transfers outweigh the fill it saves.
  "$kiln" plan "$testdir/../examples/fashion_cnn.kl" --cluster "$testdir/plan/cpu4.cluster" --no-calibrate --global-batch 64 --pipeline 2 \
    --shard dp,zero1,zero2,zero3 --micro 8 --precision fp32 --json > "$tmp/s.json" || { bad "kiln plan with stages"; exit 1; }
  python3 - "$tmp/s.json" << 'EOF2' || fail=1
import json, math, sys
d = json.load(open(sys.argv[1]))
L = [l for l in d["layouts"] if l["fits"]]
got = {(l["shard"], l["schedule"]) for l in L}
want = {(s, c) for s in ("dp", "zero1", "zero2", "zero3") for c in ("gpipe", "1f1b", "zero_bubble", "interleaved")}
assert got == want, f"layouts: missing {sorted(want - got)}, extra {sorted(got - want)}"
for l in L:
    for k in ("step_s", "critical_s", "cores_s", "compute_s", "intra_s"):
        assert math.isfinite(l[k]) and l[k] >= 0, f"{l['shard']} {l['schedule']}: {k} = {l[k]}"
    assert l["step_s"] > 0, l
for s in ("dp", "zero1", "zero2", "zero3"):
    c = {l["schedule"]: l["critical_s"] for l in L if l["shard"] == s}
    assert c["interleaved"] < c["1f1b"], f"{s}: interleaved {c['interleaved']} against 1f1b {c['1f1b']}"
print(f"ok: {len(L)} pipeline layouts (dp, zero1-3 x 4 schedules) on 4 CPU ranks, each a finite prediction")
EOF2
  # pipeline_virtual_stages = 3 (the GPT, which has 6 stages' cuts): the
  # interleaved layouts only, bubble (P-1)/(3m+P-1), below v = 2's.
  g=$testdir/../examples/gpt.kl
  for v in 2 3; do
    "$kiln" plan "$g" --cluster "$testdir/plan/cpu4.cluster" --no-calibrate --global-batch 16 --pipeline 2 --shard dp \
      --micro 4 --precision fp32 --set pipeline_virtual_stages=$v --json > "$tmp/v$v.json" || { bad "kiln plan, v = $v"; exit 1; }
  done
  python3 - "$tmp/v2.json" "$tmp/v3.json" << 'EOF2' || fail=1
import json, sys
l2, l3 = ({l["schedule"]: l for l in json.load(open(f))["layouts"]} for f in sys.argv[1:])
m = l3["interleaved"]["accumulate"]
for v, l in ((2, l2), (3, l3)):
    il = l["interleaved"]
    assert abs(il["bubble"] * (v * m + 1) - 1) < 1e-5, f"v = {v}: bubble {il['bubble']}"  # printed to 6 digits
    assert ("pipeline_virtual_stages=" in il["command"]) and "pipeline_virtual_stages" not in l["1f1b"]["command"], l
assert l3["interleaved"]["critical_s"] < l2["interleaved"]["critical_s"] < l2["1f1b"]["critical_s"]
print(f"ok: the GPT at P = 2, m = {m}: interleaved v = 3 bubble 1/{3 * m + 1}, critical path below v = 2's")
EOF2
  ;;
memory)
  # One rank: micro-batch 16 does not fit in 120 kB (recomputation does
  # not save it), 4 x 4 does.
  sed -e 's/^device = a100x2$/device = a100x1/' -e 's/^memory = 1 MB$/memory = 120 kB/' "$cluster" > "$tmp/one.cluster"
  grep -q "^device = a100x1" "$tmp/one.cluster" || { bad "the cluster file's device line"; exit 1; }
  "$kiln" plan "$model" --cluster "$tmp/one.cluster" --global-batch 16 --micro 16,4 --json > "$tmp/m.json"
  python3 - "$tmp/m.json" > "$tmp/m.txt" << 'EOF' || { bad "the layouts are not as expected"; cat "$tmp/m.txt"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
f = {l["micro"]: l for l in d["layouts"] if l["precision"] == "fp32"}
assert not f[16]["fits"] and "over 0.12 MB" in f[16]["why"], f[16]
assert f[4]["fits"] and f[4]["memory"] <= 120000, f[4]
for m in (16, 4):
    assert f[m]["memory"] == f[m]["persistent"] + f[m]["arena"]
print(f[16]["memory"], f[4]["memory"])
EOF
  read -r m16 m4 < "$tmp/m.txt"
  ok "micro-batch 16 dropped ($m16 bytes a rank > 120000), 4 x 4 kept ($m4 bytes)"
  build_log=$("$kiln" build "$model" -o "$tmp/tiny" 2>&1) || { bad "kiln build"; echo "$build_log"; exit 1; }
  # The executable's peak is the plan's memory per rank (MB, 2 decimals).
  "$tmp/tiny" --steps 1 --batch 4 --accumulate 4 --memory-limit 120000 > "$tmp/t4.txt" 2>&1 ||
    { bad "4 x 4 does not train under the limit"; cat "$tmp/t4.txt"; }
  want=$(awk -v b="$m4" 'BEGIN { printf "%.2f", b / 1e6 }')
  grep -q "peak $want MB with params and state" "$tmp/t4.txt" && ok "4 x 4 trains; its peak is the plan's $want MB" ||
    { bad "the executable's peak is not the plan's $want MB"; grep "memory plan" "$tmp/t4.txt"; }
  if "$tmp/tiny" --steps 1 --batch 16 --memory-limit 120000 > "$tmp/t16.txt" 2>&1; then
    bad "micro-batch 16 trained over the limit"
  else
    want=$(awk -v b="$m16" 'BEGIN { printf "%.2f", b / 1e6 }')
    grep -q "the training step needs $want MB .* over the memory limit" "$tmp/t16.txt" &&
      ok "micro-batch 16 refused by the executable: $(grep -o 'the training step needs [^(]*' "$tmp/t16.txt")" ||
      { bad "not refused for the plan's reason ($want MB)"; cat "$tmp/t16.txt"; }
  fi
  # Pipeline stages: a rank's arena is its own stages' (the training
  # executable places it again), so a P = 2 layout's arena is the larger
  # of the two ranks' arenas the executable prints.
  # (examples/mlp.kl: tiny.kl has one layer to cut.)
  mlp=$testdir/../examples/mlp.kl
  "$kiln" build "$mlp" -o "$tmp/mlp" > /dev/null || { bad "kiln build mlp"; exit 1; }
  "$kiln" plan "$mlp" --cluster "$testdir/plan/cpu4.cluster" --global-batch 16 --micro 4 --pipeline 2 \
    --tensor-parallel 1 --shard dp --precision fp32 --json > "$tmp/p.json"
  pa=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
l = next(l for l in d["layouts"] if l["P"] == 2 and l["schedule"] == "1f1b")
print(l["arena"], l["D"], l["micro"], l["accumulate"])' "$tmp/p.json") || { bad "no P = 2 1f1b layout"; exit 1; }
  read -r pa D mi acc <<< "$pa"
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np $((2 * D)) "$tmp/mlp" --data synthetic:600 --steps 1 \
    --batch "$mi" --accumulate "$acc" --set pipeline_parallel=2 --set pipeline_schedule=1f1b > "$tmp/p2.txt" 2>&1 ||
    { bad "P = 2 does not train"; cat "$tmp/p2.txt"; exit 1; }
  got=$(grep -o "^pipeline: rank [01]: arena [0-9.]* [kMG]*B" "$tmp/p2.txt" | python3 -c 'import sys
u = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}
print(max(float(l.split()[4]) * u[l.split()[5]] for l in sys.stdin))')
  python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 0.006 * a)' "$pa" "$got" &&
    ok "P = 2 x D = $D: the plan's arena $pa bytes is the larger rank's ($got, printed to 3 digits)" ||
    { bad "P = 2: the plan's arena $pa bytes against the ranks' $got"; grep "^pipeline: rank" "$tmp/p2.txt"; }
  ;;
errors)
  expect() { # WHAT PATTERN ARGS...
    local what=$1 pat=$2
    shift 2
    if "$kiln" plan "$@" > "$tmp/out" 2> "$tmp/err"; then
      bad "$what: exit 0"
    elif grep -q -- "$pat" "$tmp/err"; then
      ok "$what: $(head -1 "$tmp/err")"
    else
      bad "$what: no '$pat' in: $(cat "$tmp/err")"
    fi
  }
  expect "no cluster" "no --cluster" "$model" --global-batch 8
  expect "no global batch" "no --global-batch" "$model" --cluster h100x8
  expect "unknown cluster" "not a built-in cluster" "$model" --cluster nosuch --global-batch 8
  expect "bad count" "bad count after x" "$model" --cluster h100x0 --global-batch 8
  expect "bad precision" "unknown 'fp8'" "$model" --cluster h100x8 --global-batch 8 --precision fp8
  expect "a key plan chooses" "kiln plan chooses batch" "$model" --cluster h100x8 --global-batch 8 --set batch=4
  expect "bad --micro" "positive integers" "$model" --cluster h100x8 --global-batch 8 --micro 4,x
  expect "unknown flag" "unknown option" "$model" --cluster h100x8 --global-batch 8 --bogus
  expect "--calibrate off the CPU" "needs --cluster cpu" "$model" --cluster h100x8 --global-batch 8 --calibrate
  printf 'device = a100\nbogus = 3\n' > "$tmp/c1"
  expect "unknown key" "c1:2: unknown key 'bogus'" "$model" --cluster "$tmp/c1" --global-batch 8
  printf 'device = a100\nmemory = lots\n' > "$tmp/c2"
  expect "bad value" "c2:2: memory: bad value 'lots'" "$model" --cluster "$tmp/c2" --global-batch 8
  printf 'nodes = 2\n' > "$tmp/c3"
  expect "no device first" "c3:1: the first key must be" "$model" --cluster "$tmp/c3" --global-batch 8
  printf 'device = tpu\n' > "$tmp/c4"
  expect "unknown device" "c4:1: unknown device 'tpu'" "$model" --cluster "$tmp/c4" --global-batch 8
  printf 'device = a100x1\nmemory = 1 kB\n' > "$tmp/c5"
  expect "nothing fits" "no layout of" "$model" --cluster "$tmp/c5" --global-batch 8
  expect "a model that does not load" "error" "$tmp/c5" --cluster h100x8 --global-batch 8
  ;;
zero)
  "$kiln" plan "$testdir/plan/psi75.kl" --cluster a100x8 --nodes 8 --global-batch 64 --micro 1 --precision fp32 \
    --tensor-parallel 1 --pipeline 1 --memory 1TB --json > "$tmp/z.json" || { bad "kiln plan of psi75.kl"; exit 1; }
  python3 - "$tmp/z.json" << 'EOF2' || fail=1
import json, re, sys
d = json.load(open(sys.argv[1]))
psi, N, MB = 7.5e9, 64, 1e6
paper = {"dp": 16 * psi, "zero1": 4 * psi + 12 * psi / N, "zero2": 2 * psi + 14 * psi / N, "zero3": 16 * psi / N}
# Kiln at fp32: params 4, gradients 4, Adam's m and v 8, ZeRO's fp32 master slice 4 (zero1, zero2).
kiln = {"dp": 16 * psi, "zero1": 8 * psi + 12 * psi / N, "zero2": 4 * psi + 16 * psi / N, "zero3": 16 * psi / N}
bad = []
seen = set()
for l in d["layouts"]:
    z = l.get("zero_memory")
    if not z:
        continue
    seen.add(l["shard"])
    m = re.search(r"ZeRO formulas \(K = 12, Psi = (\d+) params\): dp 16 Psi = ([0-9.]+) MB, zero1 ([0-9.]+) MB, "
                  r"zero2 ([0-9.]+) MB, zero3 ([0-9.]+) MB", z)
    if not m or int(m.group(1)) != psi:
        bad.append(f"{l['shard']}: no formula row for Psi = 7.5e9 in: {z}")
        continue
    for k, got in zip(("dp", "zero1", "zero2", "zero3"), m.groups()[1:]):
        if abs(float(got) - paper[k] / MB) > 0.005 + 1e-9:  # printed to 0.01 MB
            bad.append(f"{l['shard']}: the {k} row {got} MB, the paper's formula {paper[k] / MB:.3f} MB")
    held = float(re.search(r"total ([0-9.]+) MB", z).group(1))
    if abs(held - kiln[l["shard"]] / MB) > 0.005 + 1e-9:
        bad.append(f"{l['shard']}: the plan holds {held} MB a rank, Kiln's bytes give {kiln[l['shard']] / MB:.3f} MB")
    print(f"{l['shard']}: the plan holds {held:.2f} MB a rank; ZeRO's formula {paper[l['shard']] / MB:.2f} MB "
          f"(x {held / (paper[l['shard']] / MB):.3f})")
if seen != set(paper):
    bad.append(f"layouts with zero_memory: {sorted(seen)}")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
EOF2
  [ $fail = 0 ] && ok "Psi = 7.5e9 on 64 ranks: ZeRO's rows 120000, 31406.25, 16640.62, 1875 MB; dp and zero3 at fp32 hold them exactly"
  ;;
trains)
  mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
  mlp=$testdir/../examples/mlp.kl
  plan=("$kiln" plan "$mlp" --cluster cpux2 --global-batch 16 --precision fp32 --micro 2,8 --no-calibrate
        --set "data=synthetic(600)" --json)
  "${plan[@]}" > "$tmp/all.json" || { bad "kiln plan without a limit"; exit 1; }
  limit=$(python3 -c '
import json, sys
m = [l["memory"] for l in json.load(open(sys.argv[1]))["layouts"] if "memory" in l and l["built"]]
print((min(m) + max(m)) // 2)' "$tmp/all.json")
  "${plan[@]}" --memory "$limit" > "$tmp/p.json" || { bad "kiln plan under $limit bytes"; exit 1; }
  # One line a layout: keep COMMAND... or drop MB FLAGS...
  python3 - "$tmp/p.json" "$limit" > "$tmp/runs.txt" << 'EOF2' || { bad "the plan's layouts"; cat "$tmp/runs.txt"; exit 1; }
import json, shlex, sys
d = json.load(open(sys.argv[1]))
keep = drop = 0
for l in d["layouts"]:
    if not l["built"] or "memory" not in l:
        continue  # refused before planning (not built, or no plan)
    if l["fits"]:
        keep += 1
        print("keep", l["command"].split(" && ", 1)[1])
    else:
        drop += 1
        flags = ["--batch", str(l["micro"]), "--accumulate", str(l["accumulate"]), "--precision", l["precision"],
                 "--shard", l["shard"], "--set", "data=synthetic(600)", "--memory-limit", sys.argv[2]]
        if l["P"] > 1:
            flags += ["--set", f"pipeline_parallel={l['P']}", "--set", f"pipeline_schedule={l['schedule']}"]
        print("drop", "%.2f" % (l["memory"] / 1e6), l["P"] * l["D"], shlex.join(flags))
assert keep >= 4 and drop >= 2, f"{keep} kept, {drop} dropped: the limit should split them"
EOF2
  build_log=$("$kiln" build "$mlp" -o "$tmp/mlp" 2>&1) || { bad "kiln build"; echo "$build_log"; exit 1; }
  kept=0 dropped=0
  while read -r what rest; do
    if [ "$what" = keep ]; then
      # The printed command line, its ./mlp and mpirun pointed here.
      eval "cmd=($rest)"
      [ "${cmd[0]}" = mpirun ] && cmd=("${mpi[@]}" "${cmd[@]:1}")
      for i in "${!cmd[@]}"; do [ "${cmd[$i]}" = ./mlp ] && cmd[$i]=$tmp/mlp; done
      if "${cmd[@]}" --steps 2 --eval-every 0 < /dev/null > "$tmp/run.txt" 2>&1 && grep -q '^done: 2 steps' "$tmp/run.txt" &&
        grep -q '^plan: measured [0-9.]* ms/step (every step: none past the warm-up) against kiln plan' "$tmp/run.txt"; then
        kept=$((kept + 1))
      else
        bad "kept but does not train: $rest"
        tail -5 "$tmp/run.txt"
      fi
    else
      read -r want np flags <<< "$rest"
      eval "args=($flags)"
      if "${mpi[@]}" -np "$np" "$tmp/mlp" "${args[@]}" --steps 2 --eval-every 0 --device cpu --threads 1 \
           < /dev/null > "$tmp/run.txt" 2>&1; then
        bad "dropped for memory ($want MB) but trains: $flags"
      elif grep -q "the training step needs $want MB .* over the memory limit" "$tmp/run.txt"; then
        dropped=$((dropped + 1))
      else
        bad "dropped for $want MB, refused otherwise: $flags"
        grep -m3 -i "error\|needs" "$tmp/run.txt"
      fi
    fi
  done < "$tmp/runs.txt"
  want=$(grep -c . "$tmp/runs.txt")
  [ $((kept + dropped)) = "$want" ] || bad "$((kept + dropped)) of the $want layouts checked"
  ok "under a limit of $limit bytes: $kept layouts kiln plan keeps train with its command lines, $dropped it drops" \
     "for memory are refused by the executable for the same bytes"
  ;;
*)
  echo "unknown case $case_"
  exit 2
  ;;
esac
exit $fail
