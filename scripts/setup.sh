#!/usr/bin/env bash
# Installs the Debian packages Kiln's build, tests and demo need, when any
# is missing. Safe to run again; does nothing when all are present.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  flex bison
  zlib1g-dev
  libarchive-dev libpng-dev libjpeg62-turbo-dev   # tar shards and their images (runtime/data/wds_tar.c, decode.c)
  libopenblas-dev libopenblas-openmp-dev
  libdnnl-dev     # oneDNN: bf16 GEMMs with the CPU's bf16 instructions
  libopenmpi-dev openmpi-bin
  libcmocka-dev
  llvm-14-tools   # FileCheck for the golden tests
  clang-14 libclang-rt-14-dev   # the libFuzzer build (tests/fuzz) and build.clang_cpu
  python3         # test scripts edit bytes in data files
  python3-pip     # tests install safetensors, numpy, tensorboard, webdataset from PyPI into build/pydeps
  xz-utils        # the GPU kit compresses its libraries (tests/gpu/kit.sh)
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
else
  echo "setup: all packages present"
fi
