# Sourced by every test script (tests/lib_check.sh checks that each does):
#   source "$(dirname "$0")/lib.sh"        (or ../lib.sh from a subfolder)
#
# Bit-exact comparisons. A test that compares two runs bit for bit needs
# every run to add in the same order. The CPU backend's thread count
# decides that order (OpenMP reductions, OpenBLAS's split of each GEMM),
# and by default that is the machine's physical cores, which differ
# from machine to machine. So one thread, for
# every executable a test script starts (the CPU backend takes
# OMP_NUM_THREADS as its default; --threads and the train block's
# threads still win). And the CPU: a GPU would run atomics in a
# different order every time (the GPU has tests/gpu/run.sh).
export OMP_NUM_THREADS=1
export OPENBLAS_NUM_THREADS=1
export CUDA_VISIBLE_DEVICES=
