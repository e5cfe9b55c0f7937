#!/usr/bin/env bash
# Regenerates the exported-symbol lists the fakes must match. Run by hand when a new CUDA/NCCL/NVML
# release matters; the lists are committed so the build needs none of these packages.
#   cudart13.syms  real libcudart.so.13 of the CUDA 13.0 toolkit (/usr/local/cuda/lib64)
#   cudart12.syms  real libcudart.so.12 from PyPI nvidia-cuda-runtime-cu12==12.8.90
#   cuda.syms      the CUDA 13.0 toolkit's driver stub (lib64/stubs/libcuda.so): the real
#                  libcuda.so.1's export list; unversioned, like the real driver
#   nccl.syms      real libnccl.so.2 2.28.9 shipped with the CUDA 13.0 toolkit
#   nvml.syms      the NVML API that PyPI nvidia-ml-py==13.615.71 binds (pynvml.py); NVML ships with
#                  the driver, which these machines lack
set -euo pipefail
cd "$(dirname "$0")"
defined() { nm -D --defined-only "$1" | awk '$2 ~ /^[TW]$/ {sub(/@.*/, "", $3); print $3}' | sort -u; }
defined /usr/local/cuda/lib64/libcudart.so.13 > cudart13.syms
defined /usr/local/cuda/lib64/stubs/libcuda.so > cuda.syms
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && pip download -q --no-deps nvidia-cuda-runtime-cu12==12.8.90 nvidia-ml-py==13.615.71 &&
  python3 -m zipfile -e nvidia_cuda_runtime_cu12-*.whl cu12 && python3 -m zipfile -e nvidia_ml_py-*.whl nvml)
defined "$tmp"/cu12/nvidia/cuda_runtime/lib/libcudart.so.12 > cudart12.syms
defined /usr/local/cuda/lib64/libnccl.so.2 > nccl.syms
# plus the names C callers link or dlsym (nvml.h #defines nvmlInit to nvmlInit_v2 etc.; NCCL's
# src/misc/nvmlwrap.cc and PyTorch's c10/cuda/driver_api.cpp resolve these), and the legacy exports.
{ grep -o '_nvmlGetFunctionPointer("[A-Za-z0-9_]*")' "$tmp"/nvml/pynvml.py | sed 's/.*("\(.*\)")/\1/'
  printf '%s\n' nvmlInit nvmlInit_v2 nvmlDeviceGetCount nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByPciBusId \
    nvmlDeviceGetPciInfo nvmlDeviceGetPciInfo_v2 nvmlDeviceGetComputeRunningProcesses; } | sort -u > nvml.syms
wc -l ./*.syms
