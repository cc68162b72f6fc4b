#!/usr/bin/env bash
# safetensors out and in, checked with the safetensors library itself
# (installed from PyPI by tests/ckpt/pydeps.sh into PYDEPS):
#  - kiln export (fp32 and --dtype bf16) and --export at the end of
#    training write every param and running statistic of the checkpoint
#    under its model-file name, byte for byte (bf16: rounded to nearest
#    even), with the metadata; --export's file is kiln export's;
#  - a file the library writes (scaled values, float16) is what --init
#    starts from: the checkpoint saved right after holds its values;
#  - --eval-only --init of the export gives the line --eval-only --resume
#    of the checkpoint gives;
#  - missing and extra names, another shape: --init refuses listing them,
#    --init-partial loads the rest and lists them;
#  - malformed files get an error naming the file and the field.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
pydeps=$2
pip_deps "$pydeps" "safetensors.numpy, numpy" safetensors numpy
check="python3 $testdir/ckpt/ckpt_check.py"
enter_tmpdir
build_example fashion_cnn cnn
build_example mlp

# ---- out: the CNN (params and batch-norm running statistics) ----
./cnn --threads 1 --quiet --steps 3 --eval-every 0 --save c.ckpt --export end.safetensors > /dev/null || bad "the CNN run"
"$kiln" export c.ckpt -o c.safetensors || bad "kiln export"
"$kiln" export c.ckpt -o c16.safetensors --dtype bf16 || bad "kiln export --dtype bf16"
$check export c.safetensors c.ckpt f32 || fail=1
$check export c16.safetensors c.ckpt bf16 || fail=1
cmp -s end.safetensors c.safetensors && ok "--export at the end wrote kiln export's file" || bad "--export differs from kiln export"
python3 -c "from safetensors.numpy import load_file; print(sorted(load_file('c.safetensors'))[:3])"

# ---- in ----
./mlp --threads 1 --quiet --steps 4 --save m.ckpt > /dev/null || bad "the MLP run"
"$kiln" export m.ckpt -o m.safetensors || bad "kiln export m.ckpt"
for op in scale f16; do
  $check write-st m.safetensors $op.safetensors $op
  ./mlp --threads 1 --quiet --steps 3 --init $op.safetensors --save-init i_$op.ckpt --save t_$op.ckpt > /dev/null ||
    bad "--init $op.safetensors"
  $check init $op.safetensors i_$op.ckpt full && ok "--init from the library's file ($op) then 3 steps of training" || fail=1
done
a=$(./mlp --threads 1 --eval-only --resume m.ckpt); b=$(./mlp --threads 1 --eval-only --init m.safetensors)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "--eval-only: --init of the export = --resume of the checkpoint: $a" || bad "'$a' vs '$b'"

# missing and extra names, another shape
$check write-st m.safetensors de.safetensors drop-extra
out=$(./mlp --threads 1 --quiet --steps 1 --init de.safetensors 2>&1); rc=$?
want="de.safetensors: does not fit the model: missing from the file (1): 'dense.3.w'; in the file but not in the model (1): 'head.w'"
[ $rc -eq 1 ] && grep -qF -- "$want" <<< "$out" && grep -qF -- "---> --init-partial" <<< "$out" && ok "--init lists: $(head -1 <<< "$out")" ||
  { bad "--init of a file with names missing and extra: exit $rc"; echo "$out"; }
./mlp --threads 1 --quiet --steps 1 --save-init fresh.ckpt --save f.ckpt > /dev/null
out=$(./mlp --threads 1 --quiet --steps 1 --init de.safetensors --init-partial --save-init p.ckpt --save q.ckpt 2>&1 > /dev/null); rc=$?
want="kiln: --init-partial de.safetensors: kept at their initial values (not in the file) (1): 'dense.3.w'; ignored (not in the model) (1): 'head.w'"
[ $rc -eq 0 ] && grep -qxF -- "$want" <<< "$out" && ok "--init-partial: $out" || { bad "--init-partial: exit $rc"; echo "$out"; }
$check init de.safetensors p.ckpt partial || fail=1
python3 -c "
import sys; sys.path.insert(0, '$testdir/ckpt')
from ckpt_check import entries
_, a, _ = entries('fresh.ckpt'); _, b, _ = entries('p.ckpt')
assert a['dense.3.w'] == b['dense.3.w'], 'dense.3.w is not its initial value'
print('ok: dense.3.w kept its initial value')" || bad "--init-partial changed dense.3.w"
$check write-st m.safetensors sh.safetensors shape
out=$(./mlp --threads 1 --quiet --steps 1 --init sh.safetensors 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "sh.safetensors: does not fit the model: 'dense.1.b' is f32[257] in the file but f32[256] in the model" <<< "$out" &&
  ok "another shape: $(head -1 <<< "$out")" || { bad "another shape: exit $rc"; echo "$out"; }

# ---- malformed files ----
bad_st() {
  local name=$1 file=$2 pattern=$3
  out=$(./mlp --threads 1 --quiet --steps 1 --init "$file" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$pattern" <<< "$out" && ok "$name: $out" || { bad "$name: exit $rc"; echo "$out"; }
}
mk() { python3 -c "
import struct, sys
h = sys.argv[2].encode(); data = bytes(int(sys.argv[3]))
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + data)" "$@"; }
printf 'garbage!' > g.safetensors
bad_st "not safetensors" g.safetensors "g.safetensors: not a safetensors file"
mk o.safetensors '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}' 12
bad_st "overlapping tensors" o.safetensors "o.safetensors: tensors 'a' and 'b' overlap"
mk n.safetensors '{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}' 8
bad_st "offsets vs shape" n.safetensors "n.safetensors: tensor 'a' (f32[3]): data_offsets cover 8 bytes; the shape needs 12"
mk e.safetensors '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,80]}}' 8
bad_st "offsets past the end" e.safetensors "e.safetensors: tensor 'a': data_offsets must be [begin, end] within the 8 bytes of data"
mk d.safetensors '{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}' 8
bad_st "unknown dtype" d.safetensors "d.safetensors: tensor 'a': dtype C64 is not one Kiln reads"
mk j.safetensors '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}' 4
bad_st "unterminated JSON" j.safetensors "j.safetensors: expected '}' at byte"
bad_st "no such file" nothere.safetensors "nothere.safetensors: cannot open"
exit $fail
