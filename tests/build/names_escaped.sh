#!/usr/bin/env bash
# Names from files reach the terminal with control bytes escaped: a
# safetensors tensor named "ESC[31mEVIL" (an ANSI colour escape) is
# reported by --init as \x1b[31mEVIL, and no ESC byte is printed.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
build_example mlp
python3 - <<'PY'
import json, struct
h = json.dumps({"\x1b[31mEVIL": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
open("evil.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0\0\0\0")
PY
out=$(./mlp --init evil.safetensors --steps 1 --quiet --threads 1 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qF '\x1b[31mEVIL' <<< "$out" && ! grep -q $'\x1b' <<< "$out"; then
  ok "the tensor name is printed escaped: $(grep -F 'EVIL' <<< "$out" | head -1 | cut -c1-120)"
else
  bad "exit $rc; raw escape or no name in:"; cat -v <<< "$out" | head -5
fi
exit $fail
