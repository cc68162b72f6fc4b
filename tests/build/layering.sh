#!/usr/bin/env bash
# Folders are stages: no stage's objects use a symbol defined by a stage
# above it (tests/build/layering.py over the per-stage archives and the kiln
# command's objects). The include paths refuse an upward #include when
# compiling; this checks the link-level direction and cycles.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
build=$1
shift
python3 "$(dirname "$0")/layering.py" "$build" "$@"
