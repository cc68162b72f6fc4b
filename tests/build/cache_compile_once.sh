#!/usr/bin/env bash
# The kernel cache compiles each key once:
#  - kiln build of one model twice compiles its kernels once (the second
#    links the cached object);
#  - four processes that need one new plan at once (the ranks of a job)
#    compile it once: the first takes the key's lock, the others wait for
#    it and load what it wrote.
# The compiler is a wrapper that logs each compile (-c or -shared) and
# takes a second over it, so that without the lock all four would start
# their own compile before the first one ends.
source "$(dirname "$0")/../lib.sh"
set -euo pipefail
kiln=$1
new_tmpdir
export KILN_CACHE_DIR=$tmp/cache
cat > "$tmp/cc" <<'CC'
#!/usr/bin/env bash
for a in "$@"; do
  case $a in -c|-shared) echo "$a" >> "$KILN_TEST_CC_LOG"; sleep 1 ;; esac
done
exec cc "$@"
CC
chmod +x "$tmp/cc"
export KILN_CC=$tmp/cc KILN_TEST_CC_LOG=$tmp/compiles
: > "$tmp/compiles"
"$kiln" build "$testdir/../examples/mlp.kl" -o "$tmp/a"
"$kiln" build "$testdir/../examples/mlp.kl" -o "$tmp/b"
n=$(grep -c -- '-c' "$tmp/compiles" || true)
[ "$n" -eq 1 ] && ok "two builds of one model: its kernels compiled once" || bad "two builds compiled the kernels $n times"
cmp -s "$tmp/a" "$tmp/b" && ok "the two executables are the same" || bad "the two executables differ"
: > "$tmp/compiles"
run() { "$tmp/a" --batch 48 --steps 1 --eval-every 0 --data synthetic:64 --quiet; }
run > /dev/null 2>&1 || bad "a run needing --batch 48 failed"
one=$(grep -c -- '-shared' "$tmp/compiles" || true)
[ "$one" -ge 1 ] || bad "a run needing --batch 48 compiled nothing"
export KILN_CACHE_DIR=$tmp/cache2
: > "$tmp/compiles"
pids=()
for r in 1 2 3 4; do run > "$tmp/run$r.txt" 2>&1 & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || bad "a run needing --batch 48 failed"; done
n=$(grep -c -- '-shared' "$tmp/compiles" || true)
[ "$n" -eq "$one" ] && ok "four processes needing --batch 48's plans at once: compiled once each ($n)" ||
  bad "four processes compiled $n times what one process compiles $one times"
exit $fail
