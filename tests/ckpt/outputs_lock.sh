#!/usr/bin/env bash
# Two runs naming one output (runtime/files/outfile_lock.c): while a run holds
# its --metrics and --save files, a second run naming either is refused
# before training, with an error naming the file and its lock, and the
# first run's metrics stay valid JSON lines; another file is not locked;
# the lock goes when the run does (here by SIGTERM), a lock file left by
# a killed run does not block the next; a link planted at the lock's name
# is refused, never followed; /dev/null gets no lock file in /dev.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
build_example mlp
run=(./mlp --data synthetic:256 --batch 32 --threads 1 --quiet --log-every 1)

# The holder: a run far longer than the test, stopped below (--epochs:
# --steps only shortens a run, and the default epochs end within 20 s
# under a sanitizer on a loaded machine).
"${run[@]}" --epochs 100000 --metrics m.json --save a.ckpt > /dev/null 2> holder.err & holder=$!
for _ in $(seq 200); do
  [ -s m.json ] && break
  kill -0 $holder 2> /dev/null || break
  sleep 0.1
done
[ -s m.json ] || { echo "FAIL: the holding run wrote no metrics in 20 s"; cat holder.err; exit 1; }

expect_error "a second run on one --metrics" \
  "m.json is being written by another kiln run (lock .m.json.kiln-lock held)" "${run[@]}" --steps 2 --metrics m.json
expect_error "a second run on one --save" \
  "a.ckpt is being written by another kiln run (lock .a.ckpt.kiln-lock held)" "${run[@]}" --steps 2 --save a.ckpt
expect_error "the lock is per file, whatever the path's spelling" \
  "./m.json is being written by another kiln run (lock ./.m.json.kiln-lock held)" "${run[@]}" --steps 2 --metrics ./m.json
"${run[@]}" --steps 2 --metrics other.json > /dev/null 2>&1 && [ "$(grep -c '"type": "train"' other.json)" -eq 2 ] &&
  ok "another --metrics file beside it is not locked" || bad "a run on another --metrics file failed"

kill -TERM $holder; wait $holder
if python3 -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
for n, l in enumerate(lines, 1):
    json.loads(l)
assert sum(json.loads(l).get("type") == "train" for l in lines) >= 1
print(len(lines))' m.json > nlines 2> py.err; then
  ok "the holder's metrics are $(cat nlines) valid JSON lines"
else
  bad "the holder's metrics are not valid JSON lines"; tail -2 py.err
fi
[ ! -e .m.json.kiln-lock ] && [ ! -e .a.ckpt.kiln-lock ] && ok "SIGTERM removed the holder's lock files" ||
  bad "lock files left after SIGTERM: $(ls -a | grep kiln-lock)"
# A lock file nobody holds (a run killed by SIGKILL) does not block.
touch .m.json.kiln-lock
"${run[@]}" --steps 2 --metrics m.json > /dev/null 2>&1 && [ "$(grep -c '"type": "train"' m.json)" -eq 2 ] &&
  [ ! -e .m.json.kiln-lock ] && ok "a stale lock file is taken, and removed at exit" || bad "a stale lock file blocked the run"
# A link planted at the lock's name is refused, its target untouched.
echo precious > victim
ln -s victim .l.json.kiln-lock
expect_error "a link at the lock's name" "l.json: cannot take the lock .l.json.kiln-lock" "${run[@]}" --steps 2 --metrics l.json
[ "$(cat victim)" = precious ] && ok "the link's target is untouched" || bad "the link's target was written"
# A character device is written straight, with no lock beside it.
"${run[@]}" --steps 2 --save /dev/null > /dev/null 2>&1 && [ ! -e /dev/.null.kiln-lock ] &&
  ok "--save /dev/null: no lock file in /dev" || bad "--save /dev/null failed or left /dev/.null.kiln-lock"
exit $fail
