#!/usr/bin/env bash
# The data cache (runtime/data/idx_cache.c): a gzip IDX file is inflated
# once and read back from the private cache folder's data/ afterwards.
#  - a run from the cache trains exactly as a run that inflates (losses
#    and evaluation, bit for bit at one thread), and reads the entry
#    without writing it again;
#  - KILN_DATA_CACHE=0 writes no entry; another value than 0 or 1 is refused;
#  - an entry whose data is flipped or cut short, one planted from another
#    file (valid check, another path), a link planted at its name, one
#    owned by another user: none is used, each is written again, a link's
#    target untouched;
#  - a changed file (new content, the old modification time put back) is
#    read anew, not from its old entry;
#  - the entries of files that are gone are removed when an entry is
#    written, and so are temporaries left by a writer stopped long ago.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
src=/usr/share/datasets/fashion-mnist
[ -f "$src/train-images-idx3-ubyte.gz" ] || { echo "skipped: no Fashion-MNIST in $src"; exit 77; }
new_tmpdir
fail=0
"$kiln" build "$testdir/../examples/mlp.kl" -o "$tmp/mlp" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
# A small copy of Fashion-MNIST (4,000 training and 1,000 test images, so
# each gzip file of images is above the cache's 256 KiB); INVERT: every
# seventh byte of the training images inverted (another file's data).
small() { # DIR [INVERT]
  mkdir -p "$1" && python3 - "$src" "$@" <<'PY'
import gzip, struct, sys
src, out, invert = sys.argv[1], sys.argv[2], len(sys.argv) > 3
for split, n in (("train", 4000), ("t10k", 1000)):
    img = gzip.open(f"{src}/{split}-images-idx3-ubyte.gz").read()
    lab = gzip.open(f"{src}/{split}-labels-idx1-ubyte.gz").read()
    data = bytearray(img[16:16 + n * 784])
    if invert and split == "train":
        for i in range(0, len(data), 7):
            data[i] = 255 - data[i]
    open(f"{out}/{split}-images-idx3-ubyte.gz", "wb").write(gzip.compress(struct.pack(">4I", 0x803, n, 28, 28) + bytes(data), 1, mtime=0))
    open(f"{out}/{split}-labels-idx1-ubyte.gz", "wb").write(gzip.compress(struct.pack(">2I", 0x801, n) + lab[8:8 + n], 1, mtime=0))
PY
}
small "$tmp/fm"
export KILN_CACHE_DIR=$tmp/cache
# run NAME [ENV...]: losses and evaluation of a short run on $tmp/fm into NAME.
run() {
  local name=$1
  shift
  env "$@" "$tmp/mlp" --data "$tmp/fm" --steps 3 --eval-every 3 --threads 1 --seed 1 --quiet --metrics "$tmp/$name.json" \
    > "$tmp/$name.log" 2>&1 || { bad "run $name"; cat "$tmp/$name.log"; }
  python3 -c 'import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r["type"] in ("train", "eval"): print(r["type"], r.get("loss"), r.get("accuracy"))' "$tmp/$name.json" > "$tmp/$name.txt"
}
same() { cmp -s "$tmp/ref.txt" "$tmp/$1.txt" && ok "$2" || { bad "$2"; diff "$tmp/ref.txt" "$tmp/$1.txt" | head -4; }; }
entries() { find "$tmp/cache/data" -maxdepth 1 -name '*.idx' 2> /dev/null | sort; }

run ref KILN_DATA_CACHE=0
[ -z "$(entries)" ] && ok "KILN_DATA_CACHE=0 writes no entry" || bad "KILN_DATA_CACHE=0 wrote $(entries)"
run first
n=$(entries | wc -l)
[ "$n" = 2 ] && ok "two entries (the train and test images; labels are small)" || bad "$n entries: $(entries)"
same first "a run that fills the cache trains as one that inflates"
train=$(ls -S $(entries) | head -1)
before=$(stat -c '%i %Y' "$train")
cp "$train" "$tmp/train.idx"
sleep 1
run hit
same hit "a run from the cache trains as one that inflates"
[ "$(stat -c '%i %Y' "$train")" = "$before" ] && ok "the entry was read, not written again" || bad "the entry was rewritten"

# Entries that must not be used: each is written again.
size=$(stat -c %s "$train")
check_rewritten() { # WHAT
  run bad
  same bad "$1: not used"
  cmp -s "$train" "$tmp/train.idx" && [ ! -L "$train" ] && [ "$(stat -c %u "$train")" = "$(id -u)" ] &&
    ok "$1: written again" || bad "$1: the entry was not written again"
}
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2]) - 5); b = f.read(1); f.seek(-1, 1); f.write(bytes([b[0] ^ 1]))' "$train" "$size"
check_rewritten "an entry with a flipped byte"
truncate -s $((size - 1000)) "$train"
check_rewritten "an entry cut short"
echo precious > "$tmp/victim"
rm "$train" && ln -s "$tmp/victim" "$train"
check_rewritten "a link at the entry's name"
[ "$(cat "$tmp/victim")" = precious ] && ok "the link's target is untouched" || bad "the link's target was written"
if [ "$(id -u)" = 0 ]; then
  chown 65534 "$train"
  check_rewritten "an entry owned by another user"
fi
# Another file's entry, valid in itself, planted under this file's name.
small "$tmp/other" invert
"$tmp/mlp" --data "$tmp/other" --steps 1 --threads 1 --quiet > /dev/null 2>&1 || bad "the run on the other data"
other=$(ls -S $(entries) | grep -vxF "$train" | head -1)
[ -n "$other" ] && cp "$other" "$train"
check_rewritten "another file's entry under this file's name"

# A changed file with its old modification time is read anew.
cp "$tmp/other/train-images-idx3-ubyte.gz" "$tmp/changed.gz"
touch -r "$tmp/fm/train-images-idx3-ubyte.gz" "$tmp/changed.gz"
cat "$tmp/changed.gz" > "$tmp/fm/train-images-idx3-ubyte.gz"
touch -r "$tmp/changed.gz" "$tmp/fm/train-images-idx3-ubyte.gz"
run changed
run changed_ref KILN_DATA_CACHE=0
if cmp -s "$tmp/changed.txt" "$tmp/changed_ref.txt" && ! cmp -s "$tmp/changed.txt" "$tmp/ref.txt"; then
  ok "a file changed under its old modification time is read anew"
else
  bad "a changed file was read from its old entry"
fi

# Entries of files that are gone, and old temporaries, go when one is written.
gone=$(entries | grep -c . || true)
rm -rf "$tmp/other"
stale_tmp="$tmp/cache/data/0123456789abcdef.idx.AbCdEf"
fresh_tmp="$tmp/cache/data/0123456789abcdef.idx.GhIjKl"
echo x > "$stale_tmp" && touch -d '1 hour ago' "$stale_tmp" && echo x > "$fresh_tmp"
cp "$tmp/fm/train-images-idx3-ubyte.gz" "$tmp/fm/x.gz" && mv "$tmp/fm/x.gz" "$tmp/fm/train-images-idx3-ubyte.gz" # a new file: its entry is written
run pruned
left=$(entries | wc -l)
[ "$gone" -ge 3 ] && [ "$left" = 2 ] && ok "the entries of removed files are removed ($gone -> $left)" ||
  bad "entries: $gone before, $left after removing a data folder"
[ ! -e "$stale_tmp" ] && [ -e "$fresh_tmp" ] && ok "a temporary an hour old is removed, a new one kept" ||
  bad "temporaries: stale $( [ -e "$stale_tmp" ] && echo kept || echo removed), new $( [ -e "$fresh_tmp" ] && echo kept || echo removed)"
cmp -s "$tmp/pruned.txt" "$tmp/changed_ref.txt" && ok "after all that, the run still trains as one that inflates" ||
  bad "the last run differs from one that inflates"
expect_error "KILN_DATA_CACHE=x" "KILN_DATA_CACHE='x': 0 (no data cache) or 1" env KILN_DATA_CACHE=x "$tmp/mlp" --data "$tmp/fm" --steps 1 --quiet
exit $fail
