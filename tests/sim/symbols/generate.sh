#!/usr/bin/env bash
# Regenerates the exported-symbol lists the fakes must match. Run by hand when a new CUDA/NCCL/NVML
# release matters; the lists are committed so the build needs none of these packages.
#   cudart13.syms  real libcudart.so.13 from PyPI nvidia-cuda-runtime==13.2.86 (what torch 2.15 links;
#                  a superset of the CUDA 13.0 toolkit's list, so programs built on either load)
#   cudart12.syms  real libcudart.so.12 from PyPI nvidia-cuda-runtime-cu12==12.8.90
#   cuda.syms      the CUDA 13.0 toolkit's driver stub (lib64/stubs/libcuda.so): the real
#                  libcuda.so.1's export list; unversioned, like the real driver
#   nccl.syms      the union of two real libnccl.so.2 export lists: 2.28.9 (shipped with the CUDA 13.0
#                  toolkit) and the newest release on PyPI, nvidia-nccl-cu13==2.32.6 (same list as
#                  nvidia-nccl-cu12==2.32.3); every list since 2.16 is a subset, so one library loads
#                  programs linked against any of them (tests/sim/README.md, "The simulated NCCL")
#   nvml.syms      the NVML API that PyPI nvidia-ml-py==13.615.71 binds (pynvml.py); NVML ships with
#                  the driver, which these machines lack
set -euo pipefail
cd "$(dirname "$0")"
defined() { nm -D --defined-only "$1" | awk '$2 ~ /^[TW]$/ {sub(/@.*/, "", $3); print $3}' | sort -u; }
defined /usr/local/cuda/lib64/stubs/libcuda.so > cuda.syms
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && pip download -q --no-deps nvidia-cuda-runtime-cu12==12.8.90 nvidia-cuda-runtime==13.2.86 \
    nvidia-ml-py==13.615.71 nvidia-nccl-cu13==2.32.6 &&
  python3 -m zipfile -e nvidia_cuda_runtime_cu12-*.whl cu12 && python3 -m zipfile -e nvidia_ml_py-*.whl nvml &&
  python3 -m zipfile -e nvidia_cuda_runtime-13*.whl cu13 && python3 -m zipfile -e nvidia_nccl_cu13-*.whl nccl)
defined "$tmp"/cu13/nvidia/cu13/lib/libcudart.so.13 > cudart13.syms
defined "$tmp"/cu12/nvidia/cuda_runtime/lib/libcudart.so.12 > cudart12.syms
{ defined /usr/local/cuda/lib64/libnccl.so.2; defined "$tmp"/nccl/nvidia/nccl/lib/libnccl.so.2; } | sort -u > nccl.syms
# plus the names C callers link or dlsym (nvml.h #defines nvmlInit to nvmlInit_v2 etc.; NCCL's
# src/misc/nvmlwrap.cc and PyTorch's c10/cuda/driver_api.cpp resolve these), and the legacy exports.
{ grep -o '_nvmlGetFunctionPointer("[A-Za-z0-9_]*")' "$tmp"/nvml/pynvml.py | sed 's/.*("\(.*\)")/\1/'
  printf '%s\n' nvmlInit nvmlInit_v2 nvmlDeviceGetCount nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByPciBusId \
    nvmlDeviceGetPciInfo nvmlDeviceGetPciInfo_v2 nvmlDeviceGetComputeRunningProcesses; } | sort -u > nvml.syms
wc -l ./*.syms
