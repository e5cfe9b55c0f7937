/* A program that reaches CUDA and NCCL only through dlopen + dlsym, as Python ctypes wrappers do
 * (vLLM's PyNcclCommunicator, its custom allreduce): libnccl.so.2 opened RTLD_LOCAL by the path
 * given, libcudart.so.13 by name; linked to neither. One rank of a `p2psim launch` job:
 *   dlsym_workload NCCL_PATH ID_DIR
 * or, on any NCCL without a GPU (real releases): dlsym_workload NCCL_PATH (ncclGetVersion and
 * ncclGetUniqueId only).
 * Rank 0 publishes the NCCL id in ID_DIR (write, rename); each rank all-reduces 1 MiB of floats on
 * its GPU (LOCAL_RANK), copies 256 KiB to the next GPU with cudaMemcpyPeer and takes an IPC handle.
 * It prints what the libraries answered, so a traced run must print the same. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { char internal[128]; } UniqueId; /* ncclUniqueId */
typedef struct { char reserved[64]; } IpcHandle; /* cudaIpcMemHandle_t */

static void* Sym(void* lib, const char* name) {
  void* fn = dlsym(lib, name);
  if (fn == NULL) {
    fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
    exit(2);
  }
  return fn;
}

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: dlsym_workload NCCL_PATH [ID_DIR]\n");
    return 2;
  }
  if (argc == 2) {
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      fprintf(stderr, "dlopen: %s\n", dlerror());
      return 2;
    }
    int version = 0;
    UniqueId id;
    printf("ncclGetVersion %d", ((int (*)(int*))Sym(lib, "ncclGetVersion"))(&version));
    printf(" %d\n", version);
    printf("ncclGetUniqueId %d\n", ((int (*)(UniqueId*))Sym(lib, "ncclGetUniqueId"))(&id));
    return 0;
  }
  int rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
  int nranks = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
  int dev = atoi(getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "0");
  void* nccl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  if (nccl == NULL || cudart == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  int (*set_device)(int) = (int (*)(int))Sym(cudart, "cudaSetDevice");
  int (*malloc_dev)(void**, size_t) = (int (*)(void**, size_t))Sym(cudart, "cudaMalloc");
  int (*memcpy_peer)(void*, int, const void*, int, size_t) =
      (int (*)(void*, int, const void*, int, size_t))Sym(cudart, "cudaMemcpyPeer");
  int (*ipc_get)(IpcHandle*, void*) = (int (*)(IpcHandle*, void*))Sym(cudart, "cudaIpcGetMemHandle");
  int (*sync)(void) = (int (*)(void))Sym(cudart, "cudaDeviceSynchronize");
  int (*get_id)(UniqueId*) = (int (*)(UniqueId*))Sym(nccl, "ncclGetUniqueId");
  int (*init_rank)(void**, int, UniqueId, int) = (int (*)(void**, int, UniqueId, int))Sym(nccl, "ncclCommInitRank");
  int (*all_reduce)(const void*, void*, size_t, int, int, void*, void*) =
      (int (*)(const void*, void*, size_t, int, int, void*, void*))Sym(nccl, "ncclAllReduce");
  int (*destroy)(void*) = (int (*)(void*))Sym(nccl, "ncclCommDestroy");

  UniqueId id;
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/nccl.id", argv[2]);
  if (rank == 0) {
    printf("ncclGetUniqueId %d\n", get_id(&id));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (f == NULL || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) return 3;
  } else {
    FILE* f = NULL;
    for (int i = 0; i < 3000 && (f = fopen(path, "rb")) == NULL; ++i) usleep(10000);
    if (f == NULL || fread(&id, sizeof id, 1, f) != 1) return 3;
    fclose(f);
  }
  printf("cudaSetDevice %d\n", set_device(dev));
  const size_t count = 256 * 1024; /* floats: 1 MiB */
  void *send = NULL, *recv = NULL, *peer = NULL;
  printf("cudaMalloc %d %d\n", malloc_dev(&send, count * 4), malloc_dev(&recv, count * 4));
  void* comm = NULL;
  printf("ncclCommInitRank %d\n", init_rank(&comm, nranks, id, rank));
  printf("ncclAllReduce %d\n", all_reduce(send, recv, count, 7 /* ncclFloat32 */, 0 /* ncclSum */, comm, NULL));
  printf("cudaDeviceSynchronize %d\n", sync());
  int next = (dev + 1) % 2;
  set_device(next);
  malloc_dev(&peer, 256 * 1024);
  set_device(dev);
  printf("cudaMemcpyPeer %d\n", memcpy_peer(peer, next, send, dev, 256 * 1024));
  IpcHandle h;
  printf("cudaIpcGetMemHandle %d\n", ipc_get(&h, send));
  printf("ncclCommDestroy %d\n", destroy(comm));
  return 0;
}
