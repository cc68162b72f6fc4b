#!/usr/bin/env bash
# Installs the Python packages the safetensors and --predict tests read
# Kiln's files with (safetensors, numpy) from PyPI into DIR, once: the
# ctest fixture ckpt.pydeps. Exit 77 (skip) only when PyPI cannot be
# reached; any other failure fails.
source "$(dirname "$0")/../lib.sh"
set -uo pipefail
pip_deps "$1" "safetensors.numpy, numpy" safetensors numpy
python3 -c "import safetensors, numpy; print('ok: safetensors', safetensors.__version__, 'and numpy', numpy.__version__, 'in $1')"
