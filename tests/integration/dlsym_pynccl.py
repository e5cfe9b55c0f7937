"""One rank of a job that uses NCCL and the CUDA runtime the way vLLM's PyNcclCommunicator and its
custom allreduce do: through Python ctypes (dlopen RTLD_LOCAL, dlsym per function), linked to
neither. Run under `p2psim launch`:  python3 dlsym_pynccl.py LIBNCCL [LIBCUDART] ID_DIR
(LIBCUDART: libcudart.so.13 unless given, e.g. an unversioned libcudart.so link)
Rank 0 publishes the ncclUniqueId in ID_DIR; every rank all-reduces 1 MiB of float32 on its GPU
(LOCAL_RANK) and prints what the libraries answered (a traced run must print the same)."""
import ctypes
import os
import sys
import time


class NcclUniqueId(ctypes.Structure):  # vLLM's ncclUniqueId: 128 bytes
    _fields_ = [("internal", ctypes.c_byte * 128)]


class CudaIpcMemHandle(ctypes.Structure):  # cudaIpcMemHandle_t: 64 bytes
    _fields_ = [("reserved", ctypes.c_byte * 64)]


nccl = ctypes.CDLL(sys.argv[1])  # vLLM: find_nccl_library() -> "libnccl.so.2"
cudart = ctypes.CDLL(sys.argv[2] if len(sys.argv) > 3 else "libcudart.so.13")
rank, world, dev = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
c_void_p, c_int, c_size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
for lib, name, args in (
    (nccl, "ncclGetUniqueId", [ctypes.POINTER(NcclUniqueId)]),
    (nccl, "ncclCommInitRank", [ctypes.POINTER(c_void_p), c_int, NcclUniqueId, c_int]),
    (nccl, "ncclAllReduce", [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p]),
    (nccl, "ncclCommDestroy", [c_void_p]),
    (cudart, "cudaSetDevice", [c_int]),
    (cudart, "cudaMalloc", [ctypes.POINTER(c_void_p), c_size_t]),
    (cudart, "cudaMemcpy", [c_void_p, c_void_p, c_size_t, c_int]),
    (cudart, "cudaDeviceSynchronize", []),
    (cudart, "cudaIpcGetMemHandle", [ctypes.POINTER(CudaIpcMemHandle), c_void_p]),
):
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = c_int, args

uid = NcclUniqueId()
path = os.path.join(sys.argv[-1], "nccl.id")
if rank == 0:
    print("ncclGetUniqueId", nccl.ncclGetUniqueId(ctypes.byref(uid)))
    with open(path + ".tmp", "wb") as f:
        f.write(bytes(uid.internal))
    os.rename(path + ".tmp", path)
else:
    for _ in range(3000):
        if os.path.exists(path):
            break
        time.sleep(0.01)
    with open(path, "rb") as f:
        ctypes.memmove(ctypes.byref(uid), f.read(128), 128)
print("cudaSetDevice", cudart.cudaSetDevice(dev))
count = 256 * 1024  # float32: 1 MiB
send, recv = c_void_p(), c_void_p()
print("cudaMalloc", cudart.cudaMalloc(ctypes.byref(send), count * 4), cudart.cudaMalloc(ctypes.byref(recv), count * 4))
host = (ctypes.c_float * count)(*([rank + 1.0] * count))
print("cudaMemcpy H2D", cudart.cudaMemcpy(send, host, count * 4, 1))
comm = c_void_p()
print("ncclCommInitRank", nccl.ncclCommInitRank(ctypes.byref(comm), world, uid, rank))
print("ncclAllReduce", nccl.ncclAllReduce(send, recv, count, 7, 0, comm, None))  # float32, sum
print("cudaDeviceSynchronize", cudart.cudaDeviceSynchronize())
out = (ctypes.c_float * count)()
print("cudaMemcpy D2H", cudart.cudaMemcpy(out, recv, count * 4, 2), "sum[0]", out[0])
handle = CudaIpcMemHandle()
print("cudaIpcGetMemHandle", cudart.cudaIpcGetMemHandle(ctypes.byref(handle), send))
print("ncclCommDestroy", nccl.ncclCommDestroy(comm))
