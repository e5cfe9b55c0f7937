"""One rank of a job that uses NCCL and the CUDA runtime the way vLLM's PyNcclCommunicator and its
custom allreduce do: through Python ctypes (dlopen RTLD_LOCAL, dlsym per function), linked to
neither. Run under `p2psim launch`:  python3 dlsym_pynccl.py LIBNCCL [LIBCUDART] ID_DIR
(LIBCUDART: libcudart.so.13 unless given, e.g. an unversioned libcudart.so link)
Rank 0 publishes the ncclUniqueId in ID_DIR; every rank all-reduces 1 MiB of float32 on its GPU
(LOCAL_RANK), then captures that allreduce into a CUDA graph on a stream of its own and launches it
GRAPH_REPLAYS times, and prints what the libraries answered (a traced run must print the same)."""
import ctypes
import os
import sys
import time

GRAPH_REPLAYS = 3


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
    (cudart, "cudaStreamCreate", [ctypes.POINTER(c_void_p)]),
    (cudart, "cudaStreamBeginCapture", [c_void_p, c_int]),
    (cudart, "cudaStreamEndCapture", [c_void_p, ctypes.POINTER(c_void_p)]),
    (cudart, "cudaGraphInstantiate", [ctypes.POINTER(c_void_p), c_void_p, ctypes.c_ulonglong]),
    (cudart, "cudaGraphLaunch", [c_void_p, c_void_p]),
    (cudart, "cudaStreamSynchronize", [c_void_p]),
    (cudart, "cudaGraphExecDestroy", [c_void_p]),
    (cudart, "cudaGraphDestroy", [c_void_p]),
    (cudart, "cudaStreamDestroy", [c_void_p]),
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
# vLLM captures its allreduce into a CUDA graph and replays it: the same through the ctypes handles.
stream, graph, graph_exec = c_void_p(), c_void_p(), c_void_p()
print("cudaStreamCreate", cudart.cudaStreamCreate(ctypes.byref(stream)))
print("cudaStreamBeginCapture", cudart.cudaStreamBeginCapture(stream, 2))  # relaxed
print("ncclAllReduce (captured)", nccl.ncclAllReduce(send, recv, count, 7, 0, comm, stream))
print("cudaStreamEndCapture", cudart.cudaStreamEndCapture(stream, ctypes.byref(graph)))
print("cudaGraphInstantiate", cudart.cudaGraphInstantiate(ctypes.byref(graph_exec), graph, 0))
print("cudaGraphLaunch", [cudart.cudaGraphLaunch(graph_exec, stream) for _ in range(GRAPH_REPLAYS)])
print("cudaStreamSynchronize", cudart.cudaStreamSynchronize(stream))
print("cudaGraphExecDestroy", cudart.cudaGraphExecDestroy(graph_exec), "cudaGraphDestroy",
      cudart.cudaGraphDestroy(graph), "cudaStreamDestroy", cudart.cudaStreamDestroy(stream))
handle = CudaIpcMemHandle()
print("cudaIpcGetMemHandle", cudart.cudaIpcGetMemHandle(ctypes.byref(handle), send))
print("ncclCommDestroy", nccl.ncclCommDestroy(comm))
