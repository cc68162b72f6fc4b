#!/usr/bin/env bash
# The reference pages name everything there is, checked against the
# program itself:
#   docs/cli.md       every command `kiln --help` lists, in a section
#                     "## `kiln COMMAND`" that names every flag of
#                     `kiln COMMAND --help`; every flag of `kiln --help`;
#                     every flag of a training executable's --help in
#                     "## The training executable"; the stage table
#                     (rows "| `stage` |" between <!-- stages --> and
#                     <!-- /stages -->) equal, in order, to the stages
#                     `kiln ir --help` prints, which must hold every pass
#                     of the pass table (passes/pipeline.c)
#                     and rows "| `KILN_NAME" for every KILN_* variable
#                     the program's sources spell
#   docs/language.md  the train-key table (<!-- train-keys -->) names
#                     exactly the keys of ir/train_config.c
#   docs/install.md   a row for every option() of CMakeLists.txt
#   README.md, docs/language.md: every model file they show compiles
# (the language's op table is checked against ir/ops.def by ops.lists).
# Usage: docs_reference.sh KILN
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kiln=$1
cli=docs/cli.md
lang=docs/language.md
fail=0
bad() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The text of one "## HEADING..." section of cli.md (up to the next "## ").
section() { awk -v h="## $1" 'index($0, h) == 1 { on = 1; next } on && /^## / { exit } on' "$cli"; }
# The flags a --help text names: -x or --xyz after a space, [, (, | or a
# line start.
flags_of() { grep -oE '(^|[][ (|,])--?[a-zA-Z][a-zA-Z0-9-]*' | sed -E 's/^[][ (|,]//' | sort -u; }
names() { grep -qE -- "(^|[^a-zA-Z0-9-])$2([^a-zA-Z0-9-]|$)" <<<"$1"; }
# Rows "| `name` |" between <!-- TAG --> and <!-- /TAG --> in FILE, in order.
table_names() { sed -n "/<!-- $2 -->/,/<!-- \/$2 -->/p" "$1" | sed -nE 's/^\| `([^`]+)` \|.*/\1/p'; }

n=0
# kiln's own flags and its commands
"$kiln" --help >"$tmp/kiln.help"
all=$(cat "$cli")
for f in $(flags_of <"$tmp/kiln.help"); do
  n=$((n + 1)); names "$all" "$f" || bad "$cli does not name kiln's flag $f"
done
commands=$(sed -n '/^commands:/,/^$/p' "$tmp/kiln.help" | sed -nE 's/^  ([a-z]+) .*/\1/p')
[ -n "$commands" ] || bad "kiln --help lists no commands"
for c in $commands; do
  text=$(section "\`kiln $c")
  if [ -z "$text" ]; then bad "$cli has no section '## \`kiln $c\`'"; continue; fi
  "$kiln" "$c" --help >"$tmp/$c.help" 2>&1 || true
  for f in $(flags_of <"$tmp/$c.help"); do
    n=$((n + 1)); names "$text" "$f" || bad "$cli, section kiln $c, does not name $f (kiln $c --help)"
  done
done

# the training executable's flags
"$kiln" build examples/mlp.kl -o "$tmp/mlp" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; bad "kiln build examples/mlp.kl failed"; }
if [ -x "$tmp/mlp" ]; then
  "$tmp/mlp" --help >"$tmp/exe.help"
  text=$(section "The training executable")
  [ -n "$text" ] || bad "$cli has no section '## The training executable'"
  for f in $(flags_of <"$tmp/exe.help"); do
    n=$((n + 1)); names "$text" "$f" || bad "$cli, section The training executable, does not name $f (EXE --help)"
  done
fi

# the stages: the pass table, kiln ir --help, the doc's table
help_stages=$("$kiln" ir --help | sed -nE 's/^ *stages: //p' | tr -d ' ' | tr ',' '\n')
[ -n "$help_stages" ] || bad "kiln ir --help prints no 'stages:' line"
for p in $(grep -oE '\{"[a-z_0-9]+", *pass_' passes/pipeline.c | sed -E 's/\{"([a-z_0-9]+)".*/\1/'); do
  grep -qx "$p" <<<"$help_stages" || bad "kiln ir --help's stages lack the pass $p of passes/pipeline.c"
done
doc_stages=$(table_names "$cli" stages)
if [ "$doc_stages" != "$help_stages" ]; then
  bad "$cli's stage table is not kiln ir --help's stages:"
  diff <(echo "$help_stages") <(echo "$doc_stages") | sed 's/^/  /' || true
fi
n=$((n + $(wc -l <<<"$help_stages")))

# the train keys
code_keys=$(grep -oE '^ *\{"[a-z_0-9]+", K_' ir/train_config.c | sed -E 's/^ *\{"([a-z_0-9]+)".*/\1/' | sort)
doc_keys=$(table_names "$lang" train-keys | sort)
[ -n "$code_keys" ] || bad "no train keys found in ir/train_config.c"
for k in $(comm -23 <(echo "$code_keys") <(echo "$doc_keys")); do bad "$lang's train-key table lacks $k"; done
for k in $(comm -13 <(echo "$code_keys") <(echo "$doc_keys")); do bad "$lang's train-key table names $k, which ir/train_config.c does not have"; done
n=$((n + $(wc -l <<<"$code_keys")))

# the whole model files shown in README.md and docs/language.md compile
# (a fenced block with a model and a train block)
for doc in README.md "$lang"; do
  awk -v out="$tmp/shown" '/^```/ { if (on) { close(f); on = 0 } else { on = 1; f = out "." ++k ".kl" } ; next } on { print > f }' "$doc"
  for f in "$tmp"/shown.*.kl; do
    [ -f "$f" ] || continue
    if grep -q '^model ' "$f" && grep -q '^train ' "$f"; then
      n=$((n + 1))
      "$kiln" ir "$f" --after check >/dev/null 2>"$tmp/shown.err" || { bad "$doc shows a model that does not compile:"; sed 's/^/  /' "$tmp/shown.err"; }
    fi
    rm -f "$f"
  done
done

# the environment variables: every KILN_* name the program's sources
# (not the tests' or benchmarks') spell has a row "| `KILN_NAME..." in cli.md
src_vars=$(find . \( -path ./tests -o -path ./bench -o -path './build*' -o -path './.*' \) -prune -o \
             \( -name '*.c' -o -name '*.h' -o -name '*.l' -o -name '*.y' \) -print0 |
           xargs -0 grep -ohE '"KILN_[A-Z0-9_]+' | tr -d '"' | sort -u)
doc_vars=$(grep -oE '^\| `KILN_[A-Z0-9_]+' "$cli" | sed 's/^| `//' | sort -u)
[ -n "$src_vars" ] || bad "no KILN_* variables found in the sources"
for v in $(comm -23 <(echo "$src_vars") <(echo "$doc_vars")); do bad "$cli's environment tables lack $v"; done
n=$((n + $(wc -l <<<"$src_vars")))

# the build options: every option() of CMakeLists.txt has a row
# "| `-DNAME=..." in docs/install.md
for o in $(sed -nE 's/^ *option\(([A-Z0-9_]+) .*/\1/p' CMakeLists.txt); do
  n=$((n + 1))
  grep -qE "^\| \`-D$o=" docs/install.md || bad "docs/install.md's CMake options lack $o"
done

[ $fail = 0 ] && echo "docs name all $n flags, stages, train keys and environment variables the program has"
exit $fail
