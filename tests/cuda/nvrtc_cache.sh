#!/usr/bin/env bash
# NVRTC's kernel cache (runtime/exec/nvrtc.c) hands out only its key's
# program's image and compiles each key once:
#  - a second run finds every kernel in the cache;
#  - an entry whose key text (KEY.key) is not the program's (as if another
#    program's key hashed alike) is a miss: compiled again and replaced;
#  - two processes needing the same new kernels at once compile each one
#    once between them (the key's lock): their hits add up to the count.
#
#   nvrtc_cache.sh NVRTC_CHECK MODEL
source "$(dirname "$0")/../lib.sh"
set -euo pipefail
check=$1 model=$2
new_tmpdir
mkdir -m 700 "$tmp/cache"
export KILN_CACHE_DIR=$tmp/cache
run() { "$check" --arch sm_90 --precisions fp32 "$model" > "$tmp/$1.txt" || { cat "$tmp/$1.txt"; bad "$1: nvrtc_check failed"; exit 1; }; }
rc=0
"$check" --arch sm_90 --precisions fp32 "$model" > "$tmp/first.txt" || rc=$?
[ $rc = 77 ] && { cat "$tmp/first.txt"; exit 77; }
[ $rc = 0 ] || { cat "$tmp/first.txt"; bad "nvrtc_check failed"; exit 1; }
counts() { sed -n 's/^sm_90: \([0-9]*\) kernels .*(\([0-9]*\) from the cache).*/\1 \2/p' "$tmp/$1.txt"; }
read -r n hits <<< "$(counts first)"
[ "$n" -gt 3 ] && [ "$hits" = 0 ] && ok "a cold cache: $n kernels compiled" || bad "a cold cache: '$n' kernels, '$hits' from the cache"
run second
read -r n2 hits <<< "$(counts second)"
[ "$hits" = "$n" ] && ok "a second run: all $n from the cache" || bad "a second run: $hits of $n from the cache"
keys=("$tmp"/cache/cuda/*.key)
[ "${#keys[@]}" = "$n" ] || bad "${#keys[@]} key files for $n kernels"
for k in "${keys[@]:0:3}"; do printf 'x' >> "$k"; done
run third
read -r n3 hits <<< "$(counts third)"
[ "$hits" = $((n - 3)) ] && ok "three entries whose key is another program's: compiled again ($hits of $n from the cache)" ||
  bad "three entries of another program's key: $hits of $n from the cache, expected $((n - 3))"
run fourth
read -r n4 hits <<< "$(counts fourth)"
[ "$hits" = "$n" ] && ok "the three entries replaced: all $n from the cache" || bad "after the replacement: $hits of $n from the cache"
rm -rf "$tmp/cache"
mkdir -m 700 "$tmp/cache"
run a & pa=$!
run b & pb=$!
wait $pa && wait $pb
read -r na ha <<< "$(counts a)"
read -r nb hb <<< "$(counts b)"
[ $((ha + hb)) = "$n" ] && ok "two processes at once: each of the $n kernels compiled once ($ha and $hb from the cache)" ||
  bad "two processes at once: $ha + $hb from the cache, expected $n (each kernel compiled once)"
exit $fail
