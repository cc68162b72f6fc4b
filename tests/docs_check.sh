#!/usr/bin/env bash
# The README and docs/ point only at files a clone of the repository has:
# every file path they name (a/b.ext in `backticks` or as a link, ending
# in .md, .sh, .c, .h, .kl or .def) exists, relative to the repository
# root, and none leads outside it (../). Bare file names are not checked.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
fail=0
n=0
for doc in README.md docs/*.md; do
  [ -f "$doc" ] || { echo "FAIL: $doc is missing"; fail=1; continue; }
  while IFS= read -r path; do
    n=$((n + 1))
    case $path in
      ../*|*/../*) echo "FAIL: $doc names $path, outside the repository"; fail=1; continue ;;
      */*) ;;
      *) continue ;; # a bare file name
    esac
    case $path in
      /*|*'*'*|*'$'*|*'<'*) continue ;; # absolute paths, globs and placeholders
    esac
    [ -e "$path" ] || { echo "FAIL: $doc names $path, which the repository does not have"; fail=1; }
  done < <(grep -oE '`[^` ]+\.(md|sh|c|h|kl|def)`|\]\([^) ]+\.(md|sh|c|h|kl|def)\)' "$doc" | sed -E 's/^`//; s/`$//; s/^\]\(//; s/\)$//' | sort -u)
done
[ $fail = 0 ] && echo "the $n file paths the README and docs/ name are in the repository"
exit $fail
