#!/usr/bin/env bash
# README.md, bench/README.md, tests/README.md and every page under docs/ point only at
# files a clone of the repository has:
# - every file path named in `backticks` (a/b.ext, ending in .md, .sh, .c,
#   .h, .kl, .def or .py) exists, relative to the repository root;
# - every relative link ](target) exists, relative to the page's own
#   folder (a #fragment is dropped; http(s) and mailto links are not
#   checked);
# and none leads outside the repository. Bare file names are not checked.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
root=$(pwd -P)
fail=0
n=0
docs=(README.md bench/README.md tests/README.md)
while IFS= read -r f; do docs+=("$f"); done < <(find docs -name '*.md' | sort)
for doc in "${docs[@]}"; do
  [ -f "$doc" ] || { echo "FAIL: $doc is missing"; fail=1; continue; }
  dir=$(dirname "$doc")
  # paths in backticks: from the repository root
  while IFS= read -r path; do
    case $path in
      */*) ;;
      *) continue ;; # a bare file name
    esac
    case $path in
      /*|*'*'*|*'$'*|*'<'*|*'{'*) continue ;; # absolute paths, globs and placeholders
      ../*|*/../*) echo "FAIL: $doc names $path, outside the repository"; fail=1; continue ;;
    esac
    n=$((n + 1))
    [ -e "$path" ] || { echo "FAIL: $doc names $path, which the repository does not have"; fail=1; }
  done < <(grep -oE '`[^` ]+\.(md|sh|c|h|kl|def|py)`' "$doc" | sed -E 's/^`//; s/`$//' | sort -u)
  # links: from the page's folder
  while IFS= read -r link; do
    target=${link%%#*}
    case $link in
      http://*|https://*|mailto:*|'#'*|'') continue ;;
    esac
    n=$((n + 1))
    full=$(realpath -m "$dir/$target")
    case $full in
      "$root"|"$root"/*) ;;
      *) echo "FAIL: $doc links $link, outside the repository"; fail=1; continue ;;
    esac
    [ -e "$full" ] || { echo "FAIL: $doc links $link, which the repository does not have ($dir/$target)"; fail=1; }
  done < <(grep -oE '\]\([^) ]+\)' "$doc" | sed -E 's/^\]\(//; s/\)$//' | sort -u)
done
[ $fail = 0 ] && echo "the $n file paths and links of README.md, bench/README.md and docs/ are in the repository"
exit $fail
