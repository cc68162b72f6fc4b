#!/usr/bin/env bash
# `kiln --help` lists every subcommand the dispatcher in tools/kiln.c
# knows (each `!strcmp(cmd, "NAME")` but the help and version flags).
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
src="$testdir/../tools/kiln.c"
help=$("$kiln" --help) || bad "kiln --help failed"
cmds=$(grep -o 'strcmp(cmd, "[a-z][a-z-]*")' "$src" | sed 's/.*"\(.*\)")/\1/' | grep -vx help | sort -u)
[ "$(wc -w <<< "$cmds")" -ge 9 ] || bad "found only $(wc -w <<< "$cmds") commands in $src"
for c in $cmds; do
  grep -qE "^  $c( |$)" <<< "$help" && ok "kiln --help lists $c" || bad "kiln --help does not list $c"
done
exit $fail
