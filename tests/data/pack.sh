#!/usr/bin/env bash
# kiln pack: every input read back byte for byte (tests/data/pack_check.py, the
# standard library's tarfile and zlib), byte-identical output on a second
# run, shard limits, the shuffle, token files, and bad inputs each with
# its expected message, a non-zero exit and the old output left as it was.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
check="python3 $testdir/data/pack_check.py"
fm=/usr/share/datasets/fashion-mnist
new_tmpdir
# expect NAME PATTERN ARGS...: kiln pack must exit 1 and print PATTERN.
expect() { expect_error "$1" "$2" "$kiln" pack "${@:3}"; }
same_dirs() { diff -r "$1" "$2" > /dev/null; }

# ---- IDX: Fashion-MNIST, 700 samples of each split, 256 per shard ----
"$kiln" pack --idx "$fm" --limit 700 --samples-per-shard 256 -o "$tmp/fm" > "$tmp/log" || { cat "$tmp/log"; exit 1; }
$check idx "$tmp/fm" "$fm" 700 || fail=1
[ "$(ls "$tmp/fm")" = "$(printf '%s\n' manifest.json test-00000{0,1,2}.tar train-00000{0,1,2}.tar)" ] \
  && ok "names: train-000000.tar ... train-000002.tar, test-..., manifest.json" || bad "shard names: $(ls "$tmp/fm")"
grep -q '"shards": "train-{000000..000002}.tar"' "$tmp/fm/manifest.json" && ok "manifest names the brace range" \
  || bad "manifest brace range"
# Determinism: a second run, elsewhere, gives the same bytes.
"$kiln" pack --idx "$fm" --limit 700 --samples-per-shard 256 -o "$tmp/fm2" > /dev/null || exit 1
same_dirs "$tmp/fm" "$tmp/fm2" && ok "packing twice gives byte-identical shards and manifest" || bad "two runs differ"
# --shard-size: every shard of more than one sample stays within the size.
"$kiln" pack --idx "$fm" --limit 700 --shard-size 100KB -o "$tmp/fms" > /dev/null || exit 1
$check idx "$tmp/fms" "$fm" 700 > /dev/null || bad "--shard-size shards do not read back"
n=$(ls "$tmp/fms"/train-*.tar | wc -l); big=$(find "$tmp/fms" -name '*.tar' -size +100000c | wc -l)
[ "$n" -ge 4 ] && [ "$big" -eq 0 ] && ok "--shard-size 100KB: $n train shards, none over 100000 bytes" \
  || bad "--shard-size: $n shards, $big over the size"
# --shuffle: another order of the same samples, the same for the same seed.
"$kiln" pack --idx "$fm" --limit 700 --shuffle 7 -o "$tmp/sh1" > /dev/null || exit 1
"$kiln" pack --idx "$fm" --limit 700 --shuffle 7 -o "$tmp/sh2" > /dev/null || exit 1
"$kiln" pack --idx "$fm" --limit 700 --shuffle 8 -o "$tmp/sh3" > /dev/null || exit 1
$check idx "$tmp/sh1" "$fm" 700 | grep -q "stored order starts 000000" && bad "--shuffle kept the input order"
$check idx "$tmp/sh1" "$fm" 700 > /dev/null || bad "shuffled shards do not read back"
same_dirs "$tmp/sh1" "$tmp/sh2" && ! cmp -s "$tmp/sh1/train-000000.tar" "$tmp/sh3/train-000000.tar" \
  && ok "--shuffle: all samples, the same order for seed 7 twice, another for seed 8" || bad "--shuffle determinism"

# ---- ImageFolder: flat and with train/test folders ----
$check make-images "$tmp/flat" flat && $check make-images "$tmp/tree" split || exit 1
"$kiln" pack --images "$tmp/flat" -o "$tmp/if1" > /dev/null && $check images "$tmp/if1" "$tmp/flat" || fail=1
"$kiln" pack --images "$tmp/tree" -o "$tmp/if2" --samples-per-shard 5 > /dev/null && $check images "$tmp/if2" "$tmp/tree" || fail=1
grep -q '"class_names": \["Dog", "cat", "zebra"\]' "$tmp/if2/manifest.json" && ok "class names sorted by bytes" \
  || bad "class names: $(grep class_names "$tmp/if2/manifest.json")"

# ---- NumPy: two fields (f32 rows and i64 labels), train and test ----
$check make-npy "$tmp/npy" || exit 1
"$kiln" pack --npy x="$tmp/npy/train_x.npy" --npy cls="$tmp/npy/train_y.npy" --test-npy x="$tmp/npy/test_x.npy" \
  --test-npy cls="$tmp/npy/test_y.npy" --samples-per-shard 4 -o "$tmp/np" > /dev/null || exit 1
$check npy "$tmp/np" train x="$tmp/npy/train_x.npy" cls="$tmp/npy/train_y.npy" || fail=1
$check npy "$tmp/np" test x="$tmp/npy/test_x.npy" cls="$tmp/npy/test_y.npy" || fail=1
"$kiln" pack --npy "$tmp/npy/u8.npy" -o "$tmp/np1" > /dev/null && $check npy "$tmp/np1" train npy="$tmp/npy/u8.npy" || fail=1

# ---- text to token files ----
for i in $(seq 1 200); do echo "line $i: the quick brown fox"; done > "$tmp/text.txt"
"$kiln" pack --text "$tmp/text.txt" -o "$tmp/tok" > /dev/null && $check tokens "$tmp/tok" "$tmp/text.txt" 0.1 || fail=1
mkdir -p "$tmp/src/b" "$tmp/src/a"; echo "print(1)" > "$tmp/src/b/x.py"; echo "import os" > "$tmp/src/a/y.py"; echo skip > "$tmp/src/a/z.txt"
"$kiln" pack --text "$tmp/src" --text-ext .py --val-fraction 0.25 -o "$tmp/tok2" > /dev/null || bad "--text folder"
printf 'import os\nprint(1)\n' > "$tmp/src.expect"
$check tokens "$tmp/tok2" "$tmp/src.expect" 0.25 > /dev/null && ok "--text DIR --text-ext .py: .py files in sorted path order" \
  || bad "--text folder contents"

# ---- bad inputs ----
expect "no IDX folder" "/nonexistent/fm: cannot read the data folder" --idx /nonexistent/fm -o "$tmp/x"
mkdir "$tmp/notidx"; echo "hello" > "$tmp/notidx/train-images-idx3-ubyte"; cp "$fm/train-labels-idx1-ubyte.gz" "$tmp/notidx/"
expect "not IDX" "train-images-idx3-ubyte: not an IDX file" --idx "$tmp/notidx" -o "$tmp/x"
mkdir "$tmp/truncidx"; gzip -dc "$fm/train-images-idx3-ubyte.gz" | head -c 100000 > "$tmp/truncidx/train-images-idx3-ubyte"
cp "$fm/train-labels-idx1-ubyte.gz" "$tmp/truncidx/"
expect "truncated IDX" "train-images-idx3-ubyte: truncated or corrupt" --idx "$tmp/truncidx" -o "$tmp/x"
mkdir "$tmp/empty"
expect "empty ImageFolder" "empty: no class folders" --images "$tmp/empty" -o "$tmp/x"
expect "no ImageFolder" "/nonexistent/imgs: cannot read the folder" --images /nonexistent/imgs -o "$tmp/x"
mkdir -p "$tmp/emptycls/cat" "$tmp/emptycls/dog"; cp "$tmp/flat/cat/img0.png" "$tmp/emptycls/cat/"
expect "empty class" "emptycls/dog: an empty class folder" --images "$tmp/emptycls" -o "$tmp/x"
mkdir -p "$tmp/txt/cat"; cp "$tmp/flat/cat/img0.png" "$tmp/txt/cat/"; echo hi > "$tmp/txt/cat/notes.txt"
expect "not an image" "txt/cat/notes.txt: not an image file" --images "$tmp/txt" -o "$tmp/x"
mkdir -p "$tmp/loose/cat"; cp "$tmp/flat/cat/img0.png" "$tmp/loose/cat/"; echo hi > "$tmp/loose/readme.md"
expect "file outside a class" "loose/readme.md: not in a class folder" --images "$tmp/loose" -o "$tmp/x"
mkdir -p "$tmp/fakepng/cat"; echo "not a png" > "$tmp/fakepng/cat/a.png"
expect "bad PNG" "fakepng/cat/a.png: not a PNG file" --images "$tmp/fakepng" -o "$tmp/x"
mkdir -p "$tmp/cutjpg/cat"; head -c 12 "$tmp/flat/cat/img1.jpeg" > "$tmp/cutjpg/cat/a.jpg"
expect "truncated JPEG" "cutjpg/cat/a.jpg: truncated or corrupt JPEG" --images "$tmp/cutjpg" -o "$tmp/x"
cp -r "$tmp/tree" "$tmp/tree2"; mkdir "$tmp/tree2/test/bird"; cp "$tmp/flat/cat/img0.png" "$tmp/tree2/test/bird/"
expect "test class not in train" "test/bird: class 'bird' is not one of the train split's classes" --images "$tmp/tree2" -o "$tmp/x"
d=$tmp/npy
expect "not npy" "text.txt: not a NumPy .npy file" --npy "$tmp/text.txt" -o "$tmp/x"
expect "truncated npy" "truncated.npy: truncated: the shape announces 480 bytes of data, the file holds 475" --npy "$d/truncated.npy" -o "$tmp/x"
expect "object npy" "object.npy: dtype '|O' is not supported (an object array" --npy "$d/object.npy" -o "$tmp/x"
expect "big-endian npy" "big.npy: dtype '>f4' is not supported (big-endian" --npy "$d/big.npy" -o "$tmp/x"
expect "Fortran npy" "fortran.npy: a Fortran-order array" --npy "$d/fortran.npy" -o "$tmp/x"
expect "0-d npy" "scalar.npy: a 0-dimensional array" --npy "$d/scalar.npy" -o "$tmp/x"
expect "count mismatch" "nine.npy: 9 samples, but" --npy x="$d/train_x.npy" --npy y="$d/nine.npy" -o "$tmp/x"
expect "mixed shapes" "other_shape.npy: samples of shape (4, 3) and dtype <f4, but the train split's" \
  --npy x="$d/train_x.npy" --test-npy x="$d/other_shape.npy" -o "$tmp/x"
expect "float labels" "float_labels.npy: the field cls holds labels, a 1-D integer array" --npy cls="$d/float_labels.npy" -o "$tmp/x"
expect "negative label" "negative_labels.npy: label -1 at index 2 is negative" --npy cls="$d/negative_labels.npy" -o "$tmp/x"
grep -q '"num_classes": 1002' "$tmp/np/manifest.json" && ok ".npy labels: num_classes is the largest label + 1" \
  || bad "num_classes for .npy labels: $(grep num_classes "$tmp/np/manifest.json")"
mkdir -p "$tmp/tree3"; cp -r "$tmp/tree/train" "$tmp/tree3/"; cp -r "$tmp/tree/train/cat" "$tmp/tree3/"
expect "class beside splits" "tree3/cat: beside the split folder train" --images "$tmp/tree3" -o "$tmp/x"
expect "bad field name" "the field name 'a.b' must be letters" --npy a.b="$d/u8.npy" -o "$tmp/x"
expect "missing text" "/nonexistent/t.txt: No such file or directory" --text /nonexistent/t.txt -o "$tmp/x"
expect "two inputs" "needs one input" --idx "$fm" --text "$tmp/text.txt" -o "$tmp/x"
expect "no output" "needs one input (--idx, --images, --npy, --text or --token-ids) and -o DIR" --idx "$fm"
expect "bad shard size" "--shard-size needs a size of at least 10240 bytes" --idx "$fm" --shard-size 12parsecs -o "$tmp/x"
expect "bad count" "--samples-per-shard needs a whole number of at least 1, got '0'" --idx "$fm" --samples-per-shard 0 -o "$tmp/x"
expect "spaced seed" "--shuffle needs a whole number of at least 0, got ' 3'" --idx "$fm" --shuffle " 3" -o "$tmp/x"
expect "signed seed" "--shuffle needs a whole number of at least 0, got '+3'" --idx "$fm" --shuffle "+3" -o "$tmp/x"
expect "flag for text only" "--val-fraction applies to --text and --token-ids only" --idx "$fm" --val-fraction 0.2 -o "$tmp/x"
expect "flag for --text only" "--text-ext applies to --text only" --token-ids "$tmp/text.txt" --text-ext .py -o "$tmp/x"
expect "flag not for text" "--limit, --shuffle, --shard-size and --samples-per-shard do not apply" --text "$tmp/text.txt" --limit 3 -o "$tmp/x"
expect "bad val fraction" "--val-fraction needs a number from 0 up to (not including) 1, got '1.5'" --text "$tmp/text.txt" --val-fraction 1.5 -o "$tmp/x"
[ ! -e "$tmp/x" ] && ok "no failed run left an output folder" || bad "a failed run left $tmp/x"
# The output folder: never a folder of other files, never a file.
mkdir "$tmp/mine"; echo keep > "$tmp/mine/notes.txt"
expect "foreign folder" "mine: holds notes.txt, which kiln pack did not write" --images "$tmp/flat" -o "$tmp/mine"
[ "$(cat "$tmp/mine/notes.txt")" = keep ] && ok "the foreign folder is untouched" || bad "the foreign folder changed"
expect "output is a file" "text.txt: exists and is not a folder" --images "$tmp/flat" -o "$tmp/text.txt"
# A failed run over an earlier pack leaves it whole, and no staging folder.
cp -r "$tmp/if1" "$tmp/if1.before"
expect "failure keeps the old pack" "fakepng/cat/a.png: not a PNG file" --images "$tmp/fakepng" -o "$tmp/if1"
same_dirs "$tmp/if1" "$tmp/if1.before" && [ -z "$(ls -A "$tmp" | grep kiln-pack)" ] \
  && ok "the earlier pack is unchanged and no staging folder is left" || bad "a failed run changed the earlier pack"
expect "output is ." "-o .: name the output folder itself" --images "$tmp/flat" -o .
"$kiln" pack --images "$tmp/flat" -o "$tmp/slash/" > /dev/null && same_dirs "$tmp/slash" "$tmp/if1.before" \
  && ok "-o DIR/ (a trailing slash) writes DIR" || bad "-o with a trailing slash"
# Without libarchive (hidden in a user namespace where one can be made):
# a clear error and a hint, and the other commands still start.
la=$(ldconfig -p | awk '$1 == "libarchive.so.13" {print $NF; exit}')
if [ -n "$la" ] && unshare -rm true 2> /dev/null; then
  out=$(unshare -rm bash -c 'mount --bind /dev/null "$(readlink -f "$1")" && "$2" pack --idx "$3" --limit 5 -o "$4"; echo "rc=$?"; "$2" --version' \
        hide "$la" "$kiln" "$fm" "$tmp/nolib" 2>&1)
  if grep -q "kiln pack needs libarchive.so.13" <<< "$out" && grep -q "install the package libarchive13" <<< "$out" \
     && grep -q "rc=1" <<< "$out" && grep -q "^kiln " <<< "$out" && [ ! -e "$tmp/nolib" ]; then
    ok "without libarchive: $(grep -m1 'needs libarchive' <<< "$out"); kiln --version still runs"
  else
    bad "without libarchive: $out"
  fi
else
  echo "skip: no user namespaces here to hide libarchive in"
fi
# A successful run over an earlier pack replaces it whole (fewer shards: none left over).
"$kiln" pack --idx "$fm" --limit 300 -o "$tmp/fm" > /dev/null || bad "repacking over an earlier pack"
[ "$(ls "$tmp/fm")" = "$(printf '%s\n' manifest.json test-000000.tar train-000000.tar)" ] \
  && ok "repacking replaces the whole folder (no shard of the earlier pack left)" || bad "left over: $(ls "$tmp/fm")"
exit $fail
