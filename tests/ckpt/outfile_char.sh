#!/usr/bin/env bash
# Output files at a character device: written straight (as every Unix
# tool does), never replaced by a renamed file, kiln build's linked
# executable copied there; a FIFO is still refused.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
kiln=$1
enter_tmpdir
model="$testdir/../examples/mlp.kl"
"$kiln" ir "$model" -o ref.txt 2> err.txt || { bad "kiln ir -o ref.txt"; cat err.txt; }
out=$("$kiln" ir "$model" -o /dev/null 2>&1); rc=$?
[ $rc -eq 0 ] && [ -z "$out" ] && [ -c /dev/null ] && ok "kiln ir -o /dev/null writes to the device" ||
  { bad "kiln ir -o /dev/null: exit $rc"; echo "$out" | tail -2; }
# The bytes reach the device: /dev/stdout through a pipe is not a device,
# so write to /dev/full, whose writes fail, and expect that failure.
out=$("$kiln" ir "$model" -o /dev/full 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "/dev/full: writing failed: No space left on device" <<< "$out" &&
  ok "kiln ir -o /dev/full reports the device's failed write" ||
  { bad "kiln ir -o /dev/full: exit $rc"; echo "$out" | tail -2; }
# kiln build's executable comes from the linker (an external writer):
# linked in the temporary folder, then copied to the device.
out=$("$kiln" build "$model" -o /dev/null 2>&1); rc=$?
[ $rc -eq 0 ] && [ -c /dev/null ] && ! ls "${TMPDIR:-/tmp}"/.kiln-out.* > /dev/null 2>&1 &&
  ok "kiln build -o /dev/null links and leaves no temporary" || { bad "kiln build -o /dev/null: exit $rc"; echo "$out" | tail -2; }
out=$("$kiln" build "$model" -o /dev/full 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "/dev/full: writing failed: No space left on device" <<< "$out" &&
  ok "kiln build -o /dev/full reports the device's failed write" ||
  { bad "kiln build -o /dev/full: exit $rc"; echo "$out" | tail -2; }
mkfifo fifo
out=$(timeout 20 "$kiln" ir "$model" -o fifo 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "fifo: is a device, FIFO or socket" <<< "$out" && [ -p fifo ] &&
  ok "a FIFO is still refused and left as it was" || { bad "kiln ir -o fifo: exit $rc"; echo "$out" | tail -2; }
[ -s ref.txt ] && ok "kiln ir -o FILE still writes $(wc -c < ref.txt) bytes" || bad "ref.txt empty"
exit $fail
