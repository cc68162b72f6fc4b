#!/usr/bin/env bash
# kiln build never hands user input to a shell: output paths with a quote
# or shell syntax in them are written exactly where asked, run nothing,
# and the executables work; and no source file in the tree calls system()
# or popen() (every program is run from an argument vector).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$(realpath "$1")
root=$(pwd)
new_tmpdir
fail=0
mkdir "$tmp/it's"
for out in "it's/mlp" "x'; touch PWNED; echo '" 'y"; touch PWNED2; echo "' '$(touch PWNED3)' 'with space/m`touch PWNED4`'; do
  mkdir -p "$tmp/$(dirname "$out")"
  if ! (cd "$tmp" && "$kiln" build "$root/examples/mlp.kl" -o "$out") > "$tmp/log" 2>&1; then
    echo "FAIL: kiln build -o \"$out\" failed:"; cat "$tmp/log"; fail=1; continue
  fi
  [ -x "$tmp/$out" ] || { echo "FAIL: no executable at \"$out\""; ls -la "$tmp"; fail=1; continue; }
  "$tmp/$out" --steps 1 --eval-every 0 --quiet > "$tmp/run" 2>&1 || { echo "FAIL: \"$out\" does not run"; cat "$tmp/run"; fail=1; continue; }
  echo "ok: kiln build -o \"$out\" wrote it there, and it trains"
done
pwned=$(find "$tmp" "$root" -maxdepth 2 \( -name PWNED -o -name 'PWNED[0-9]' \))
if [ -n "$pwned" ]; then
  echo "FAIL: an output path ran a shell command: $pwned"; fail=1
fi
# The tree: no system() or popen() in any C source (comments aside).
hits=$(cd "$root" && grep -rnE '\b(system|popen)[[:space:]]*\(' --include='*.c' --include='*.h' --include='*.y' --include='*.l' \
  frontend ir passes codegen runtime tools tests bench 2>/dev/null | grep -vE ':[0-9]+:[[:space:]]*(/?\*|//)' || true)
if [ -n "$hits" ]; then
  echo "FAIL: system() or popen() in the tree:"; echo "$hits"; fail=1
else
  echo "ok: no system() or popen() in the tree"
fi
exit $fail
