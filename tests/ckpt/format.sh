#!/usr/bin/env bash
# The checkpoint format and kiln ckpt:
#  - kiln ckpt prints the header, the run state and every value (known
#    names, roles, shapes and byte counts of the MLP);
#  - versions 5, 4, 3, 2 and 1 (crafted from a version 6 file) still print and
#    resume to the same final checkpoint;
#  - every header field is checked: a crafted version, dtype, rank, byte
#    count or a flipped bit gets an error naming the file and the field,
#    from kiln ckpt and --resume alike, exit 1;
#  - kiln export refuses a version 2 file (no roles).
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
craft="python3 $testdir/ckpt/ckpt_craft.py"
enter_tmpdir
build_example mlp

./mlp --threads 1 --quiet --steps 5 --save c.ckpt > /dev/null || bad "the run failed"
"$kiln" ckpt c.ckpt > show.txt || bad "kiln ckpt failed"
cat show.txt
size=$(stat -c %s c.ckpt)
norm() { sed 's/  */ /g' "$@"; }
for line in "c.ckpt: kiln checkpoint, format version 6, $size bytes, checksum ok" "model: mlp" "precision: fp32" \
  "config: none (no --config)" \
  "step: 5 (data position: the run's shuffled order, replayed to step 5)" \
  "lr schedule: spans 5 steps (a resumed run with another span changes the lr from here on)" \
  "loss scaler: scale 1, 0 clean steps since its last change, 0 steps skipped (0 in a row)" "values: 20" \
  "optimizer state per param: adam_m, adam_v" \
  " dense.1.w param f32 [784,256] 802816" " dense.3.b param f32 [10] 40" \
  " dense.1.w.adam_v optimizer_state f32 [784,256] 802816" " loss_scale loss_scale f32 [] 4" \
  " param 6 values 235146 elements 940584 bytes" " optimizer_state 12 values 470292 elements 1881168 bytes"; do
  norm show.txt | grep -qxF -- "$line" || bad "kiln ckpt: no line '$line'"
done
# 235146 params = 784*256+256 + 256*128+128 + 128*10+10.
[ $fail -eq 0 ] && ok "kiln ckpt: header, run state, values and totals as expected"

# ---- older versions ----
./mlp --threads 1 --quiet --steps 10 --save whole.ckpt > /dev/null
for v in v5 v4 v3 v2 v1; do
  $craft c.ckpt $v.ckpt $v
  if [ $v = v5 ]; then want="evaluations: not recorded (before version 6)"
  elif [ $v = v4 ]; then want="config: not recorded (before version 5)"
  elif [ $v = v3 ]; then want="lr schedule: span not recorded (version 3)"
  else want="model, precision, roles: not recorded (version ${v#v})"; fi
  "$kiln" ckpt $v.ckpt | grep -qF "$want" || bad "kiln ckpt $v"
  ./mlp --threads 1 --quiet --steps 10 --resume $v.ckpt --save r$v.ckpt > /dev/null || bad "resume $v"
  cmp -s r$v.ckpt whole.ckpt && ok "a version ${v#v} checkpoint prints and resumes to the same final checkpoint" ||
    bad "the version ${v#v} checkpoint resumed differently"
done
out=$("$kiln" export v2.ckpt -o x.safetensors 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "v2.ckpt: a version 2 checkpoint does not record which values are params" <<< "$out" && [ ! -e x.safetensors ] &&
  ok "kiln export of version 2: $out" || bad "kiln export v2: exit $rc: $out"

# ---- crafted fields (valid checksums) ----
both() {
  local name=$1 file=$2 pattern=$3
  for how in ckpt resume; do
    if [ $how = ckpt ]; then out=$("$kiln" ckpt "$file" 2>&1); rc=$?
    else out=$(./mlp --threads 1 --quiet --steps 10 --resume "$file" 2>&1); rc=$?; fi
    if [ $rc -eq 1 ] && grep -qF -- "$pattern" <<< "$out" && ! grep -q "eval" <<< "$out"; then
      ok "$name ($how): $(grep -F -- "$pattern" <<< "$out" | head -1)"
    else
      bad "$name ($how): exit $rc, expected '$pattern'; got:"; echo "$out" | tail -2
    fi
  done
}
$craft c.ckpt ver.ckpt version 9
both "version 9" ver.ckpt "ver.ckpt: unsupported checkpoint version 9 (this kiln reads 1 to 6)"
$craft c.ckpt dt.ckpt dtype dense.2.w 99
both "dtype 99" dt.ckpt "dt.ckpt: malformed entry 'dense.2.w' (dtype)"
$craft c.ckpt dt0.ckpt dtype dense.2.w 0
both "dtype none" dt0.ckpt "dt0.ckpt: malformed entry 'dense.2.w' (dtype)"
$craft c.ckpt rank.ckpt rank dense.2.w 9
both "rank 9" rank.ckpt "rank.ckpt: malformed entry 'dense.2.w' (rank)"
$craft c.ckpt rank1.ckpt rank dense.2.w 1
both "rank 1 (the dims shift)" rank1.ckpt "rank1.ckpt: 'dense.2.w' (f32[256]) has 128 bytes in the checkpoint; its type needs 1024"
$craft c.ckpt bytes.ckpt bytes dense.3.b 4
both "byte count" bytes.ckpt "bytes.ckpt: 'dense.3.b' (f32[10]) has 44 bytes in the checkpoint; its type needs 40"
$craft c.ckpt dup.ckpt dup dense.1.w dense.1.b
both "a name twice" dup.ckpt "dup.ckpt: 'dense.1.w' is in the checkpoint twice"
python3 -c "import sys; d=bytearray(open(sys.argv[1],'rb').read()); d[100]^=1; open(sys.argv[2],'wb').write(d)" c.ckpt flip.ckpt
both "a flipped bit" flip.ckpt "flip.ckpt: checksum mismatch: the checkpoint is truncated or corrupt"
head -c 20 c.ckpt > short.ckpt
both "20 bytes" short.ckpt "short.ckpt: not a kiln checkpoint"
exit $fail
