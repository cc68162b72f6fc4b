#!/usr/bin/env bash
# Files read whole that are larger than the machine's memory (issue 32
# item 16): a sparse 1 TB safetensors file (--init), checkpoint (--resume,
# kiln ckpt) and text file (kiln pack --text) are refused before a byte is
# buffered, naming the file, its size and the memory (they read zeros
# until the machine ran out of memory); under --memory-limit a 64 GiB
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
[ ! -e "$tmp/packed" ] && ok "nothing packed" || bad "pack left $tmp/packed"
exit $fail
