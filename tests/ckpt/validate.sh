#!/usr/bin/env bash
# One validation for kiln ckpt, kiln export and --resume
# (kl_ckpt_validate): a checkpoint with a valid checksum but a value that
# is not finite, a negative Adam second moment or a loss scale that is not
# a normal fp32 number is refused by all three, exit 1, with an error
# naming the file, the value and its first bad element; a dead value (the
# loss_scale entry, which the next step overwrites) may hold inf; a whole
# checkpoint passes all three.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
craft="python3 $testdir/ckpt/ckpt_craft.py"
enter_tmpdir
sed 's/dense(x, 256)/dense(x, 4)/; s/dense(x, 128)/dense(x, 3)/; s/batch     = 128/batch = 8/' "$testdir/../examples/mlp.kl" > tiny.kl
"$kiln" build tiny.kl -o tiny > /dev/null || exit 1
run() { ./tiny --threads 1 --quiet --data synthetic:64 --steps 4 "$@"; }
run --steps 2 --save c.ckpt > /dev/null || exit 1

# kiln ckpt, kiln export and --resume on one file: exit 1 and the message,
# or exit 0 from all three (kiln export refuses a version 2 file anyway).
all() {
  local name=$1 file=$2 pattern=$3 hows=${4:-ckpt export resume}
  for how in $hows; do
    case $how in
      ckpt) out=$("$kiln" ckpt "$file" 2>&1); rc=$? ;;
      export) rm -f x.safetensors; out=$("$kiln" export "$file" -o x.safetensors 2>&1); rc=$? ;;
      resume) out=$(run --resume "$file" 2>&1); rc=$? ;;
    esac
    if [ -z "$pattern" ]; then
      [ $rc -eq 0 ] && ok "$name ($how): accepted" || { bad "$name ($how): exit $rc"; echo "$out" | tail -2; }
    elif [ $rc -eq 1 ] && grep -qF -- "$pattern" <<< "$out" && { [ $how != export ] || [ ! -e x.safetensors ]; }; then
      ok "$name ($how): $(grep -F -- "$pattern" <<< "$out" | head -1)"
    else
      bad "$name ($how): exit $rc, expected '$pattern'; got:"; echo "$out" | tail -2
    fi
  done
}
all "a whole checkpoint" c.ckpt ""
$craft c.ckpt neg.ckpt value dense.2.w.adam_v 3 -0.5
all "a negative second moment" neg.ckpt \
  "neg.ckpt: element 3 of 'dense.2.w.adam_v' is -0.5; an Adam second moment is never negative (a corrupt or foreign file)"
$craft c.ckpt zero.ckpt value dense.2.w.adam_v 3 -0
all "a second moment of -0" zero.ckpt ""
$craft neg.ckpt neg2.ckpt v2
all "a negative second moment (version 2, no roles)" neg2.ckpt \
  "neg2.ckpt: element 3 of 'dense.2.w.adam_v' is -0.5; an Adam second moment is never negative" "ckpt resume"
$craft c.ckpt inf.ckpt value dense.1.w 5 inf
all "an inf param" inf.ckpt "inf.ckpt: element 5 of 'dense.1.w' is not finite; Kiln never saves inf or nan"
$craft c.ckpt nanm.ckpt nan dense.3.b.adam_m 2
all "a NaN first moment" nanm.ckpt "nanm.ckpt: element 2 of 'dense.3.b.adam_m' is not finite; Kiln never saves inf or nan"
for s in 1e-40 1e-310 1e+300 0 inf; do
  $craft c.ckpt s$s.ckpt scale $s
  all "loss scale $s" s$s.ckpt "s$s.ckpt: the loss scale $s is not a normal fp32 number"
done
# The loss_scale value is dead (the next step writes it first): inf there
# is how a skipped fp16 step leaves it, and it is accepted.
$craft c.ckpt dead.ckpt value loss_scale 0 inf
all "inf in the dead loss_scale value" dead.ckpt ""
exit $fail
