#!/usr/bin/env bash
# Listings and notes print names from files escaped too (issue 32 item 18):
# a checkpoint value renamed "ESC[31mEVIL" (checksum rewritten) is listed
# by `kiln ckpt` as \x1b[31mEVIL, and the --init-partial note naming a
# safetensors tensor "ESC[31mEVIL" says \x1b[31mEVIL; no ESC byte reaches
# stdout or stderr. Ordinary names print as before (the golden tests).
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
build_example mlp
./mlp --steps 1 --quiet --threads 1 --save ok.ckpt > /dev/null 2>&1 || { bad "mlp --save failed"; exit 1; }
python3 - <<'PY'
import struct
d = open("ok.ckpt", "rb").read()[:-8]
p = 16
ver = struct.unpack_from("<I", d, 8)[0]
if ver >= 3:
    # model, precision, kiln version; from version 5 also the run's config
    for _ in range(4 if ver >= 5 else 3):
        p += 4 + struct.unpack_from("<I", d, p)[0]
n = struct.unpack_from("<I", d, p)[0]
evil = b"\x1b[31mEVIL"
d = d[:p] + struct.pack("<I", len(evil)) + evil + d[p + 4 + n:]
h = 0xcbf29ce484222325
for b in d:
    h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
open("evil.ckpt", "wb").write(d + struct.pack("<Q", h))
PY
out=$("$kiln" ckpt evil.ckpt 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF '  \x1b[31mEVIL  ' <<< "$out" && ! grep -q $'\x1b' <<< "$out"; then
  ok "kiln ckpt lists the value escaped: $(grep -F 'EVIL' <<< "$out" | head -1 | cut -c1-100)"
else
  bad "kiln ckpt: exit $rc; raw escape or no name in:"; cat -v <<< "$out" | head -20
fi

python3 - <<'PY'
import json, struct
h = json.dumps({"\x1b[31mEVIL": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
open("evil.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0\0\0\0")
PY
out=$(./mlp --init evil.safetensors --init-partial --steps 1 --quiet --threads 1 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF "ignored (not in the model) (1): '\x1b[31mEVIL'" <<< "$out" && ! grep -q $'\x1b' <<< "$out"; then
  ok "the --init-partial note names the tensor escaped: $(grep -F 'EVIL' <<< "$out" | head -1 | cut -c1-120)"
else
  bad "--init-partial: exit $rc; raw escape or no name in:"; cat -v <<< "$out" | head -5
fi
exit $fail
