# The preamble and helpers of every many-rank test script (tests/ranks/,
# tests/ranks/zero/, tests/ranks/comm/, tests/data/ranks_shards.sh,
# tests/precision/gemm_paths.sh), sourced right after lib.sh:
#   source "$(dirname "$0")/../lib.sh"        (../../lib.sh a folder deeper)
#   source "$testdir/ranks/helpers.bash"
# It takes the script's arguments KILN [CASE] as $kiln and $case_ (a script
# with other arguments reads them from $2, $3 after), sets $here to tests/,
# makes $tmp (removed at exit), checks for mpirun and defines the launches
# and comparisons below; shard_args (flags every ranks() run adds, e.g.
# --shard zero2) may be set at any time.
#
# Every comparison is of 20 steps' losses and of the final params (and,
# in fp32, optimizer state) in the checkpoints, with tests/ranks/compare.py;
# mpirun --oversubscribe, one thread per rank (lib.sh). Three tolerances:
#
#  - same (fp32 runs that sum in one order, or whose few reordered sums
#    stay exact: data parallel's, ZeRO's, the pipeline's, a resume in the
#    same layout): rtol 1e-5 of each loss and each element (plus 1e-5 of
#    the value's largest magnitude for elements near zero): u = 2^-24,
#    and 1e-5 is 168 u, room for a few last bits and their drift.
#  - near32 (fp32 runs whose every step sums in another order: tensor
#    parallel's split layers, a row split's partial sums added across the
#    group): losses within 1e-3 of the run's largest loss, the final
#    params as one vector within 5e-3 in the 2-norm. Last bits alone
#    would stay near 1e-5, but a value within a last bit of a kink (a
#    ReLU's zero) goes either way: a whole sample's gradient through that
#    unit, which Adam makes a step of its own, and the runs fork there.
#    The twin that shows what fp32 justifies: one rank started from its
#    own initial weights moved by one ulp each (tp_combined.sh clip runs
#    it): tests/ranks/tp_padded_mlp.kl with clip = 0.2 forks at step 8 in
#    3 of 6 such draws (an AMD EPYC Zen 3, AVX2), losses then 1.33e-4 of
#    the largest apart and params 8.7e-4, as T = 2 from one rank there;
#    the controls (no clip; half the batch) are 2.9e-2 and 8.5e-2 apart
#    in their losses, 2.3e-2 and 3.5e-2 in the params (far32).
#  - near PREC (bf16 and fp16 runs): losses within rtol 2 u sqrt(s), with
#    u the format's unit roundoff (bf16 2^-8, fp16 2^-11) and s = 20 steps:
#    bf16 3.49e-2, fp16 4.37e-3, of the loss plus the run's largest loss
#    (the logits carry the rounding, and a loss near zero moves by what
#    the logits' scale does, not by its own size); the same steps skipped;
#    and the final params, as one vector, within the same rtol in the
#    2-norm. The fp32
#    sums differ in order as above, which is nothing at 16 bits but for a
#    value within a last fp32 bit of a 16-bit rounding boundary: it rounds
#    the other way, a change of one rounding (u relative) of a weight copy
#    or an activation. Each step can add one such rounding to what each
#    value carries, with signs at random: after s steps about u sqrt(s),
#    and two runs apart by twice that. One tensor alone (a bias, which
#    starts at zero) and the optimizer state are not compared at 16 bits:
#    Adam's step is about lr whatever the gradient's size, so a gradient
#    element near zero whose sign a rounding decides moves its param a
#    whole step either way (measured: 4.3e-2 of a 48-element bias apart at
#    fp16, while the losses stayed 5.7e-4 apart), which no precision bounds.
#    Measured on an AMD EPYC Zen 4 with every GEMM path it takes (dp, zero1-3
#    and tensor parallel on 2-4 ranks, 20 steps): losses at most 5.7e-4
#    apart (fp16) and 5.0e-4 (bf16), params as one vector 4.3e-4; a run
#    with half the batch is 2e-1 apart in its losses, so the bound still
#    fails a wrong run (the controls: far). In 20 steps the params move
#    little against their size, so their check catches gross errors only
#    (a slice lost or misplaced in the checkpoint); the losses are the
#    finer test.
kiln=${1:-}
case_=${2:-}
here=$testdir
new_tmpdir
command -v mpirun > /dev/null || { echo "FAIL: no mpirun (scripts/setup.sh installs openmpi-bin)"; exit 1; }
# Sanitizer builds: Open MPI's own allocations are not Kiln's leaks; the
# full unwinder, so that their stacks reach Open MPI's libraries (the
# fast one stops in frames without frame pointers).
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
mpi=(timeout 120 mpirun --allow-run-as-root --oversubscribe)
loud=(--data synthetic:600 --steps 20 --eval-every 0 --log-every 1)
common=("${loud[@]}" --quiet)
shard_args=()
compare() { python3 "$here/ranks/compare.py" "$@"; }
# one NAME EXE ARGS...: one rank (no launcher), metrics and checkpoint NAME.
one() { local n=$1 exe=$2; shift 2; "$exe" "${common[@]}" --metrics "$tmp/$n.json" --save "$tmp/$n.ckpt" "$@" > /dev/null; }
# ranks N NAME EXE ARGS...: N ranks under mpirun, with shard_args.
ranks() {
  local np=$1 n=$2 exe=$3; shift 3
  "${mpi[@]}" -np "$np" "$exe" "${common[@]}" ${shard_args[@]+"${shard_args[@]}"} --metrics "$tmp/$n.json" \
    --save "$tmp/$n.ckpt" "$@" > /dev/null
}
# solo N NAME EXE ARGS...: the control: N runs of their own under mpirun
# (KILN_MPI=0: each process a world of one, with shard_args). Each such
# run is a rank 0 that writes, and locks, its outputs, so each gets its
# own: NAME.json and NAME.ckpt are process 0's, NAME.R.json process R's.
solo() {
  local np=$1 n=$2 exe=$3; shift 3
  # shellcheck disable=SC2016
  KILN_MPI=0 "${mpi[@]}" -np "$np" bash -c \
    'r=${OMPI_COMM_WORLD_RANK:?}; s=; [ "$r" -eq 0 ] || s=.$r; out=$1; shift
     exec "$@" --metrics "$out$s.json" --save "$out$s.ckpt"' \
    solo "$tmp/$n" "$exe" "${common[@]}" ${shard_args[@]+"${shard_args[@]}"} "$@" > /dev/null
}
# same A B [SKIP...]: equal losses and final values.
same() {
  local a=$1 b=$2; shift 2
  compare losses "$tmp/$a.json" "$tmp/$b.json" 1e-5 || { echo "FAIL: losses of $a and $b differ"; exit 1; }
  compare params "$tmp/$a.ckpt" "$tmp/$b.ckpt" 1e-5 "$@" || { echo "FAIL: final values of $a and $b differ"; exit 1; }
}
# bound16 PREC: the 16-bit tolerance above, 2 u sqrt(20).
bound16() {
  case $1 in
  bf16) echo 3.49e-2 ;;
  fp16) echo 4.37e-3 ;;
  *) echo "bound16: no 16-bit format $1" >&2; exit 2 ;;
  esac
}
# near PREC A B [SKIP...]: bf16/fp16 runs that differ only in the order of
# fp32 sums: losses within bound16 PREC, the same steps skipped, the final
# params as one vector within bound16 PREC.
near() {
  local p=$1 a=$2 b=$3 r; shift 3
  r=$(bound16 "$p")
  compare losses "$tmp/$a.json" "$tmp/$b.json" "$r" scaled ||
    { echo "FAIL: $p losses of $a and $b differ by more than 2 u sqrt(20) = $r"; exit 1; }
  compare model "$tmp/$a.ckpt" "$tmp/$b.ckpt" "$r" "$@" || { echo "FAIL: $p final params of $a and $b differ by more than $r"; exit 1; }
}
# far PREC A B: the control for near: a run that is wrong on purpose (another
# batch, lr or seed) must fail near's comparison of the losses.
far() {
  if compare losses "$tmp/$2.json" "$tmp/$3.json" "$(bound16 "$1")" scaled > /dev/null; then
    echo "FAIL: $2 and $3 agree within the $1 bound: the comparison cannot see a wrong run"; exit 1
  fi
  echo "ok: $3 (wrong on purpose) is outside the $1 bound of $2"
}
# near32 A B [SKIP...]: fp32 runs whose sums differ in order at every step
# (above): losses within 1e-3 of the largest loss, the final params as
# one vector within 5e-3.
near32() {
  local a=$1 b=$2; shift 2
  compare losses "$tmp/$a.json" "$tmp/$b.json" 1e-3 scaled ||
    { echo "FAIL: fp32 losses of $a and $b differ by more than 1e-3 of the largest loss"; exit 1; }
  compare model "$tmp/$a.ckpt" "$tmp/$b.ckpt" 5e-3 "$@" ||
    { echo "FAIL: fp32 final params of $a and $b differ by more than 5e-3"; exit 1; }
}
# far32 A B: the control for near32: a run wrong on purpose must fail it.
far32() {
  if compare losses "$tmp/$1.json" "$tmp/$2.json" 1e-3 scaled > /dev/null; then
    echo "FAIL: $1 and $2 agree within the fp32 reorder bound: the comparison cannot see a wrong run"; exit 1
  fi
  echo "ok: $2 (wrong on purpose) is outside the fp32 reorder bound of $1"
}
# differ A B: the control: losses that must not match.
differ() {
  if compare losses "$tmp/$1.json" "$tmp/$2.json" 1e-5 > /dev/null; then
    echo "FAIL: $1 and $2 match: the comparison sees nothing"; exit 1
  fi
}
build() { "$kiln" build "examples/$1.kl" -o "$tmp/$1"; }
