#!/usr/bin/env bash
# bench/pack_pystd.sh packs a standard library's own .py files: on a
# made-up stdlib with site-packages and dist-packages inside (as pyenv's
# has), its token files are byte for byte kiln pack's of the same folder
# without them, and differ from the whole folder's (what packing the
# stdlib folder used to take); a .txt file and a hidden .py at the top
# stay out, as kiln pack leaves them out of a folder it reads.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
std=lib/python3.99
mkdir -p $std/pkg $std/a_lib $std/site-packages/third $std/dist-packages
for f in abc.py zz.py pkg/__init__.py pkg/mod.py a_lib/x.py site-packages/third/__init__.py dist-packages/other.py; do
  for i in $(seq 40); do echo "# $f line $i: def f(x): return x * $i"; done > $std/$f
done
echo "not python" > $std/README.txt
echo "hidden = True" > $std/.hidden.py
echo "data" > $std/pkg/data.txt
cp -r $std clean && rm -rf clean/site-packages clean/dist-packages clean/README.txt clean/.hidden.py
KILN=$kiln bash "$testdir/../bench/pack_pystd.sh" "$std" out > log 2>&1 || { bad "pack_pystd.sh failed"; cat log; }
"$kiln" pack --text clean --text-ext .py -o want > /dev/null || exit 1
"$kiln" pack --text $std --text-ext .py -o whole > /dev/null || exit 1
if cmp -s out/train.tok want/train.tok && cmp -s out/val.tok want/val.tok; then
  ok "the stdlib's own .py files: $(grep -h 'tokens' log | tr '\n' ' ')"
else
  bad "pack_pystd.sh's tokens differ from the stdlib without its packages"
fi
cmp -s whole/train.tok want/train.tok && bad "the control: the whole folder packs the same (the check sees nothing)" ||
  ok "the control: the whole folder takes its site-packages and dist-packages too"
expect_error "not a folder" "nothere: not a folder" env KILN="$kiln" bash "$testdir/../bench/pack_pystd.sh" nothere x
exit $fail
