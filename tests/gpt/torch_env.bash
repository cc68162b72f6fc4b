# Sourced by tests/gpt/torch_first_loss.sh and bench/gpt_torch.sh:
# torch_python DIR sets $torch_py to a Python that imports torch and
# numpy: $KILN_TORCH_PYTHON when set, else python3 when it has them, else
# the virtual environment DIR/torchvenv, created and filled from PyPI
# once (torch is large: its Linux wheels bring CUDA libraries), except
# with noinstall. Returns 77 (a test's skip) when PyPI cannot be reached
# or, with noinstall, when torch is not there; 1 when an install fails.
torch_python() { # DIR [noinstall]
  local venv=$1/torchvenv
  for torch_py in "${KILN_TORCH_PYTHON:-}" python3 "$venv/bin/python"; do
    [ -n "$torch_py" ] && "$torch_py" -c "import torch, numpy" 2> /dev/null && return 0
  done
  if [ "${2:-}" = noinstall ]; then
    echo "skipped: torch is not installed (KILN_TORCH_PYTHON, python3 or $venv); bench/gpt_torch.sh installs it from PyPI (about 2 GB with its CUDA libraries, too much for the test suite) and runs this check"
    return 77
  fi
  if ! python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/torch/', timeout=20)" 2> /dev/null; then
    echo "skipped: PyPI (https://pypi.org) cannot be reached to install torch and numpy"
    return 77
  fi
  echo "installing torch and numpy from PyPI into $venv (once)"
  python3 -m venv "$venv" && "$venv/bin/python" -m pip install --quiet --disable-pip-version-check torch numpy || return 1
  torch_py=$venv/bin/python
}
