#!/usr/bin/env bash
# Files read whole that are larger than the machine's memory (issue 32
# item 16): a sparse 1 TB safetensors file (--init), checkpoint (--resume,
# kiln ckpt) and text file (kiln pack --text) are refused before a byte is
# buffered, naming the file, its size and the memory (they read zeros
# until the machine ran out of memory), and so is an .npy header whose
# samples would not fit; under --memory-limit a 64 GiB
# one is refused against the limit. Sparse files cost no disk; every
# run is bounded by timeout 10 (none should take a second).
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build examples/mlp.kl -o "$tmp/mlp" || exit 1
for f in big.safetensors big.ckpt big.txt; do truncate -s 1T "$tmp/$f" || exit 1; done
size="the file is 1.10 TB, more than the machine's memory"
expect_error "--init 1 TB" "$tmp/big.safetensors: $size" \
  timeout 10 "$tmp/mlp" --steps 1 --threads 1 --init "$tmp/big.safetensors"
expect_error "--resume 1 TB" "$tmp/big.ckpt: $size" timeout 10 "$tmp/mlp" --steps 1 --threads 1 --resume "$tmp/big.ckpt"
expect_error "kiln ckpt 1 TB" "$tmp/big.ckpt: $size" timeout 10 "$kiln" ckpt "$tmp/big.ckpt"
expect_error "pack --text 1 TB" "$tmp/big.txt needs 1.10 TB, more than the machine's memory" \
  timeout 10 "$kiln" pack --text "$tmp/big.txt" -o "$tmp/packed"
# Under --memory-limit, a 64 GiB one is refused against the limit.
truncate -s 64G "$tmp/big64.safetensors" || exit 1
expect_error "--init 64 GiB under --memory-limit 4GB" \
  "$tmp/big64.safetensors (--init, read whole) needs 68.72 GB, more than the memory limit (4.00 GB)" \
  timeout 10 "$tmp/mlp" --steps 1 --threads 1 --memory-limit 4GB --init "$tmp/big64.safetensors"
expect_error "--resume 64 GiB under --memory-limit 4GB" \
  "$tmp/big64.safetensors (--resume, read whole) needs 68.72 GB, more than the memory limit (4.00 GB)" \
  timeout 10 "$tmp/mlp" --steps 1 --threads 1 --memory-limit 4GB --resume "$tmp/big64.safetensors"
# An .npy of zero-size samples whose first axis claims 1e12 samples (a
# 128-byte file): its sample order would need 8 TB of memory, and 1e9 of
# them would need 512 GB of tar headers; both are refused before the
# staging folder exists (an out-of-memory abort and a days-long write).
npy_header() { # FILE SHAPE: a float32 .npy header with no data
  python3 - "$1" "$2" <<'PY'
import struct, sys
h = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % sys.argv[2]
h += " " * (118 - len(h)) + "\n"
open(sys.argv[1], "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
PY
}
npy_header "$tmp/zero12.npy" "(1000000000000, 0)" && npy_header "$tmp/zero9.npy" "(1000000000, 0)" || exit 1
expect_error "pack --npy 1e12 zero-size samples" \
  "x=$tmp/zero12.npy: the order of split train (1000000000000 samples) needs 8.00 TB, more than the machine's memory" \
  timeout 10 "$kiln" pack --npy "x=$tmp/zero12.npy" -o "$tmp/packed"
expect_error "pack --npy 1e9 zero-size samples" "x=$tmp/zero9.npy" \
  timeout 10 "$kiln" pack --npy "x=$tmp/zero9.npy" -o "$tmp/packed"
ls -a "$tmp" | grep -q kiln-pack && bad "pack left a staging folder: $(ls -a "$tmp" | grep kiln-pack)" || ok "no staging folder left"
[ ! -e "$tmp/packed" ] && ok "nothing packed" || bad "pack left $tmp/packed"
exit $fail
