#!/usr/bin/env bash
# The lr schedule's span is explicit across a resume (issue 32 item 12):
# checkpoints (format version 4 and later) record it, kiln ckpt shows it, and a run
# resumed into another span says so in one line. tiny.kl has a cosine
# schedule over the run's steps.
#  - saved at step 40 of a 60-step schedule (--schedule-steps 60), resumed
#    with --steps 60: the same final loss and checkpoint as 60 steps
#    uninterrupted, and no note;
#  - saved at step 40 of 40, resumed with --steps 60: the note, naming
#    both spans;
#  - that resume with --schedule-steps 40 keeps the saved span: no note.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
new_tmpdir
"$kiln" build "$testdir/train/tiny.kl" -o "$tmp/tiny" > /dev/null 2>&1 || { echo "FAIL: kiln build tiny.kl"; exit 1; }
run() { "$tmp/tiny" --epochs 20 --log-every 20 "$@" 2>&1; }
final() { grep '"type": "train"' "$1" | tail -1 | sed 's/.*"loss": \([^,]*\),.*/\1/'; }

run --steps 60 --metrics "$tmp/whole.json" --save "$tmp/whole.ckpt" > /dev/null
run --steps 40 --schedule-steps 60 --save "$tmp/a40.ckpt" > /dev/null
"$kiln" ckpt "$tmp/a40.ckpt" | grep -qxF "lr schedule: spans 60 steps (a resumed run with another span changes the lr from here on)" &&
  ok "kiln ckpt shows the span" || { bad "kiln ckpt shows no span of 60"; "$kiln" ckpt "$tmp/a40.ckpt" | head -8; }
run --steps 60 --resume "$tmp/a40.ckpt" --metrics "$tmp/a.json" --save "$tmp/a.ckpt" > "$tmp/a.txt"
if [ "$(final "$tmp/whole.json")" = "$(final "$tmp/a.json")" ] && cmp -s "$tmp/whole.ckpt" "$tmp/a.ckpt"; then
  ok "same span: final loss $(final "$tmp/a.json") and checkpoint as uninterrupted"
else
  bad "same span: final loss $(final "$tmp/a.json") against $(final "$tmp/whole.json") uninterrupted"
fi
grep -q '^note:.*schedule' "$tmp/a.txt" && bad "a note on the same span: $(grep '^note:' "$tmp/a.txt")" || ok "no note on the same span"

run --steps 40 --save "$tmp/b40.ckpt" > /dev/null
run --steps 60 --resume "$tmp/b40.ckpt" --metrics "$tmp/b.json" > "$tmp/b.txt"
want="note: the checkpoint's lr schedule spans 40 steps, this run's 60: the lr from here on follows the 60-step schedule, not the saved one (--schedule-steps 40 keeps it)"
[ "$(grep -cxF "$want" "$tmp/b.txt")" -eq 1 ] && ok "another span: $want" ||
  { bad "another span: no note"; cat "$tmp/b.txt"; }
[ "$(final "$tmp/b.json")" != "$(final "$tmp/whole.json")" ] && ok "another span trains differently ($(final "$tmp/b.json"))" ||
  bad "the stretched schedule gave the uninterrupted loss"
run --steps 60 --schedule-steps 40 --resume "$tmp/b40.ckpt" > "$tmp/c.txt"
grep -q '^note:.*schedule' "$tmp/c.txt" && bad "--schedule-steps 40: still a note" || ok "--schedule-steps 40 keeps the saved span: no note"

# A bad value names the flag.
out=$(run --steps 10 --schedule-steps 0) && bad "--schedule-steps 0 accepted" ||
  { grep -q -- "--schedule-steps" <<< "$out" && ok "--schedule-steps 0: $out" || bad "--schedule-steps 0: $out"; }
exit $fail
