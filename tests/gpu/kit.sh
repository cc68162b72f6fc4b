#!/usr/bin/env bash
# Assembles the GPU kit: everything tests/gpu/run.sh needs on a bare GPU
# machine, built here, on a machine without a GPU. A lent GPU machine has
# CUDA, a C compiler and Python with PyTorch, but no flex, bison,
# OpenBLAS, cmocka or Fashion-MNIST, and nothing can be installed there.
#
#   tests/gpu/kit.sh                 # Release build in build-kit/, the kit in .gpu-kit/
#   tests/gpu/kit.sh --build DIR     # take the binaries from an existing build (CUDA backend on)
#   tests/gpu/kit.sh --out DIR       # where the kit goes (default .gpu-kit)
#   tests/gpu/kit.sh --arch ARCHS    # the CUBINs the examples carry (default sm_90: H100, H200)
#
# The kit mirrors the repository's layout, so run.sh finds its scripts and
# models where it finds them in a checkout:
#   run.sh                      the launcher (tests/gpu/run.sh --kit KIT)
#   bin/kiln bin/kernel_check   stripped
#   bin/nccl_check              NCCL's collectives on the GPU (tests/ranks/comm/nccl_check.c),
#                               when the build has NCCL's header
#   bin/mlp bin/fashion_cnn     the examples built with --cuda-arch: their
#                               train and eval kernels as CUBINs (no NVRTC at start)
#   lib/SONAME.xz               every shared library the binaries load that
#                               tests/gpu/base-libs.txt does not list (OpenBLAS, libgfortran, ...)
#   data/fashion-mnist/*.gz     Fashion-MNIST, when this machine has it
#   examples/ tests/gpu/ bench/ the models and the scripts run.sh uses
#   licenses/                   the copyright files of what is carried
#   MANIFEST                    commit, date, CUBIN count, size and sha256 of each file
# Not carried: the CUDA driver, NVRTC and cuBLASLt (opened with dlopen at
# run time; hundreds of MB; the GPU machine's image has them: run.sh
# looks for them and says where it found them).
#
# The device tool copies the working tree (tracked and untracked files that
# git does not ignore) plus the paths a call carries, 64 MiB at most: this
# prints the kit's size with the working tree's and fails above 60 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

build=build-kit
reuse=0
out=.gpu-kit
archs=sm_90
limit_mib=60
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; reuse=1; shift ;;
    --out) out=$2; shift ;;
    --arch) archs=$2; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "kit.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
die() { echo "kit.sh: $*" >&2; exit 1; }

# ---- the binaries ----
if [ $reuse = 0 ]; then
  echo "kit: building Kiln (Release, CUDA backend) in $build"
  mkdir -p "$build"
  blog=$build/kit-build.log
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > "$blog" 2>&1 || { tail -20 "$blog"; die "cmake failed (see $blog)"; }
  # The two tools, else everything (should their target names change).
  cmake --build "$build" -j"$(nproc)" --target kiln_cli kernel_check nccl_check >> "$blog" 2>&1 ||
    cmake --build "$build" -j"$(nproc)" >> "$blog" 2>&1 || { tail -20 "$blog"; die "build failed (see $blog)"; }
fi
[ -d "$build" ] || die "$build: no such build folder"
# Found by name, not by a fixed path: the build tree's layout may change.
find_exe() { find "$build" -type f -name "$1" -perm -u+x -not -path '*/CMakeFiles/*' -printf '%d %p\n' | sort -n | head -1 | cut -d' ' -f2-; }
kiln=$(find_exe kiln)
check=$(find_exe kernel_check)
[ -n "$kiln" ] || die "$build: no kiln executable (build the kiln_cli target)"
[ -n "$check" ] || die "$build: no kernel_check, so no CUDA backend: CMake found no CUDA toolkit"

rm -rf "$out.tmp"
mkdir -p "$out.tmp"/{bin,lib,data,licenses,examples,bench,tests/gpu}
kit=$(cd "$out.tmp" && pwd)
strip -o "$kit/bin/kiln" "$kiln"
strip -o "$kit/bin/kernel_check" "$check"
nccl_check=$(find_exe nccl_check)
[ -z "$nccl_check" ] || strip -o "$kit/bin/nccl_check" "$nccl_check"

work=$(mktemp -d)
trap 'rm -rf "$work" "$kit"' EXIT
cubins=0
for ex in examples/*.kl; do
  m=$(basename "$ex" .kl)
  "$kiln" build "$ex" -o "$work/$m" --cuda-arch "$archs" > "$work/$m.log" 2>&1 || { cat "$work/$m.log"; die "kiln build $ex --cuda-arch $archs failed"; }
  n=$(nm "$work/$m" | grep -c ' kl_cubin_' || true)
  [ "$n" -gt 0 ] || die "$m: no CUBIN embedded (kiln build --cuda-arch $archs)"
  cubins=$((cubins + n))
  echo "kit: $m: $n CUBINs ($archs)"
  strip -o "$kit/bin/$m" "$work/$m"
done

# ---- the shared libraries beyond the base system ----
base=$(grep -v '^#' tests/gpu/base-libs.txt)
is_base() { grep -qxF "$1" <<< "$base"; }
missing=$(for f in "$kit"/bin/*; do ldd "$f"; done | grep 'not found' || true)
[ -z "$missing" ] || die "unresolved libraries: $missing"
for f in "$kit"/bin/*; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r soname path; do
    is_base "$soname" && continue
    real=$(readlink -f "$path")
    xz -3 -c "$real" > "$kit/lib/$soname.xz"
    echo "kit: carries $soname ($(du -k "$real" | cut -f1) KiB, $(du -k "$kit/lib/$soname.xz" | cut -f1) KiB compressed; $real)"
    pkg=$(dpkg -S "$real" 2> /dev/null | head -1 | cut -d: -f1) || true
    if [ -n "$pkg" ] && [ -f "/usr/share/doc/$pkg/copyright" ]; then
      cp "/usr/share/doc/$pkg/copyright" "$kit/licenses/$pkg.copyright"
    fi
  done

# ---- Fashion-MNIST ----
data=${KILN_DATA:-/usr/share/datasets/fashion-mnist}
have_data=1
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [ -f "$data/$f.gz" ] || have_data=0
done
if [ $have_data = 1 ]; then
  mkdir -p "$kit/data/fashion-mnist"
  cp "$data"/*-ubyte.gz "$kit/data/fashion-mnist/"
  pkg=$(dpkg -S "$(readlink -f "$data/train-images-idx3-ubyte.gz")" 2> /dev/null | head -1 | cut -d: -f1) || true
  if [ -n "$pkg" ] && [ -f "/usr/share/doc/$pkg/copyright" ]; then
    cp "/usr/share/doc/$pkg/copyright" "$kit/licenses/$pkg.copyright"
  fi
else
  echo "kit: WARNING: no Fashion-MNIST (.gz files) at $data: the kit trains on synthetic data, no accuracy"
fi

# ---- scripts and models ----
cp examples/*.kl "$kit/examples/"
mkdir -p "$kit/tests/cudalt" && cp tests/cudalt/epilogues.kl "$kit/tests/cudalt/" # run.sh 6b
cp tests/gpu/run.sh tests/gpu/report.py tests/gpu/torch_gpu.py tests/gpu/base-libs.txt "$kit/tests/gpu/"
cp bench/torch_compare.py "$kit/bench/"
cat > "$kit/run.sh" <<'EOF'
#!/usr/bin/env bash
# The GPU check from this kit (made by tests/gpu/kit.sh): see tests/gpu/run.sh --help.
kit=$(cd "$(dirname "$0")" && pwd)
exec bash "$kit/tests/gpu/run.sh" --kit "$kit" "$@"
EOF
chmod +x "$kit/run.sh"

# ---- manifest ----
{
  echo "commit $(git rev-parse --short HEAD 2> /dev/null || echo unknown)$(git diff --quiet HEAD 2> /dev/null || echo ' (with uncommitted changes)')"
  echo "made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | head -1)"
  echo "cubins $cubins ($archs)"
  # The newest glibc symbol version any carried binary needs.
  echo "glibc $(mkdir -p "$work/libs" && for f in "$kit"/lib/*.xz; do xz -dc "$f" > "$work/libs/$(basename "$f" .xz)"; done
    objdump -T "$kit"/bin/* "$work"/libs/* | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)"
  echo "data $([ $have_data = 1 ] && echo fashion-mnist || echo none)"
  (cd "$kit" && find . -type f ! -name MANIFEST | sort | while read -r f; do
    echo "file ${f#./} $(stat -c %s "$f") $(sha256sum "$f" | cut -c1-64)"
  done)
} > "$kit/MANIFEST"

# ---- size: the kit and the working tree that travels with it ----
kit_bytes=$(du -sb "$kit" | cut -f1)
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  # (a tracked file deleted in the work tree does not travel: stat skips it)
  tree_bytes=$( { git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2> /dev/null || true; } |
    awk '{s += $1} END {print s + 0}')
else # not a git checkout: everything but the build folders and the kit
  tree_bytes=$(du -sb --exclude='./build*' --exclude=./.gpu-kit --exclude='./.gpu-kit.tmp' . | cut -f1)
fi
[ -d shared ] && tree_bytes=$((tree_bytes + $(du -sb shared | cut -f1)))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
total=$((kit_bytes + tree_bytes))
echo "kit: $(mib "$kit_bytes") MiB in $out; with the working tree that travels ($(mib "$tree_bytes") MiB): $(mib $total) MiB (limit $limit_mib MiB)"
[ "$total" -le $((limit_mib * 1048576)) ] || die "too large: $(mib $total) MiB > $limit_mib MiB"
echo "size $kit_bytes kit, $tree_bytes working tree" >> "$kit/MANIFEST"

rm -rf "$out"
mv "$kit" "$out"
trap 'rm -rf "$work"' EXIT
echo "kit: ready: $out/run.sh (device call: see README, \"Running on a lent GPU\")"
