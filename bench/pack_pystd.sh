#!/usr/bin/env bash
# Packs a Python standard library's own .py files into token files for
# examples/gpt.kl: every .py file under STDLIB but the third-party
# packages installed inside it (its site-packages, Debian's
# dist-packages; pyenv's and venv-less installs keep site-packages in the
# stdlib folder, which would add every installed package to the corpus).
# The files go in the order kiln pack reads a folder (sorted by name), so
# for a stdlib without such a folder the output is the folder's own pack.
#
#   bench/pack_pystd.sh [STDLIB [OUT]]
#     STDLIB  default python3's: python3 -c 'import sysconfig;
#             print(sysconfig.get_paths()["stdlib"])'
#     OUT     default examples/data/pystd (where examples/gpt.kl reads it)
#   KILN=path/to/kiln (default ./build/kiln)
set -euo pipefail
kiln=${KILN:-./build/kiln}
stdlib=${1:-$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')}
out=${2:-examples/data/pystd}
[ -d "$stdlib" ] || { echo "pack_pystd.sh: $stdlib: not a folder" >&2; exit 1; }
args=()
while IFS= read -r -d '' p; do
  name=${p##*/}
  case $name in
  site-packages | dist-packages | .*) continue ;;
  esac
  # kiln pack takes a file named on its command line whatever its ending.
  [ -d "$p" ] || [[ $name == *.py ]] || continue
  args+=(--text "$p")
done < <(find "$stdlib" -mindepth 1 -maxdepth 1 -print0 | LC_ALL=C sort -z)
[ ${#args[@]} -gt 0 ] || { echo "pack_pystd.sh: $stdlib: no .py files" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
"$kiln" pack "${args[@]}" --text-ext .py -o "$out"
