#!/usr/bin/env bash
# A golden test: the model file carries its own expected dump as FileCheck
# directives. The first line "# RUN: --after PASS [flags]" gives kiln ir's
# flags; the dump must also survive the text round trip.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1 filecheck=$2 case=$3
flags=$(sed -n '1s/^# RUN: *//p' "$case")
new_tmpdir
# shellcheck disable=SC2086
"$kiln" ir "$case" $flags -o "$tmp/a.kir"
"$filecheck" --input-file "$tmp/a.kir" "$case"
"$kiln" ir "$tmp/a.kir" --after lower -o "$tmp/b.kir"
cmp "$tmp/a.kir" "$tmp/b.kir"
