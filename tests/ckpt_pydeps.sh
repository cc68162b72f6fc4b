#!/usr/bin/env bash
# Installs the Python packages the safetensors and --predict tests read
# Kiln's files with (safetensors, numpy) from PyPI into DIR, once: the
# ctest fixture ckpt.pydeps. Exit 77 (skip) only when PyPI cannot be
# reached; any other failure fails.
source "$(dirname "$0")/lib.sh"
set -uo pipefail
dir=$1
if PYTHONPATH=$dir python3 -c "import safetensors.numpy, numpy" 2> /dev/null; then
  echo "ok: safetensors and numpy already in $dir"
  exit 0
fi
if ! python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/safetensors/', timeout=20)" 2> /dev/null; then
  echo "skipped: PyPI (https://pypi.org) cannot be reached to install safetensors and numpy"
  exit 77
fi
python3 -m pip install --quiet --disable-pip-version-check --target "$dir" safetensors numpy || exit 1
PYTHONPATH=$dir python3 -c "import safetensors, numpy; print('ok: installed safetensors', safetensors.__version__, 'numpy', numpy.__version__)"
