# Sourced by every test script (tests/lib_check.sh checks that each does):
#   source "$(dirname "$0")/lib.sh"        (or ../lib.sh from a subfolder)
#
# Bit-exact comparisons. A test that compares two runs bit for bit needs
# every run to add in the same order. The CPU backend's thread count
# decides that order (OpenMP reductions, OpenBLAS's split of each GEMM),
# and by default that is the machine's physical cores, which differ
# from machine to machine. So one thread, for
# every executable a test script starts (the CPU backend takes
# OMP_NUM_THREADS as its default; --threads and the train block's
# threads still win). And the CPU: a GPU would run atomics in a
# different order every time (the GPU has tests/gpu/run.sh).
export OMP_NUM_THREADS=1
export OPENBLAS_NUM_THREADS=1
export CUDA_VISIBLE_DEVICES=

# The fusion groups of an IR dump (standard input), one line per group in
# order of appearance: "pattern: op op ...".
kiln_ir_groups() {
  awk '
  / group [0-9]+ / {
    for (i = 1; i <= NF; i++) if ($i == "group") { g = $(i + 1); p = $(i + 2) }
    for (i = 1; i <= NF; i++) if ($i ~ /^[a-z_0-9]+\(/) { op = $i; sub(/\(.*/, "", op); break }
    if (!(g in pat)) { order[++n] = g; pat[g] = p }
    ops[g] = ops[g] " " op
  }
  END { for (k = 1; k <= n; k++) print pat[order[k]] ":" ops[order[k]] }'
}

# kiln_expect_groups N LINE GROUPS: GROUPS (kiln_ir_groups' output) has
# exactly N groups LINE; otherwise says so and exits 1.
kiln_expect_groups() {
  local got
  got=$(printf '%s\n' "$3" | grep -cxF "$2" || true)
  if [ "$got" -ne "$1" ]; then
    echo "FAIL: expected $1 group(s) '$2', found $got"
    exit 1
  fi
}
