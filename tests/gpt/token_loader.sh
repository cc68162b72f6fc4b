#!/usr/bin/env bash
# The token data source through the loader (token_loader_check.c) on a
# token file packed from this folder's sources.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1 check=$2
new_tmpdir
"$kiln" pack --text tests/gpt -o "$tmp/data" > /dev/null || exit 1
"$check" "$tmp/data/train.tok" 16 && "$check" "$tmp/data/val.tok" 5
