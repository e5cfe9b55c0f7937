/* What the C driver-API workloads share: each step's result printed ("what code") and a failure
 * remembered for the exit status; device memory filled with a seeded pattern and compared through
 * the host, with the copy functions the workload itself uses (linked, or taken with dlsym as XLA
 * takes them). C, header-only: one workload program includes it once. */
#pragma once

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB 1024u
#define MiB (1024u * 1024u)
#define SIZE (2u * MiB)

static int g_failed = 0;

static void Check(const char* what, int r) {
  printf("%s %d\n", what, r);
  if (r != 0) g_failed = 1;
}

typedef CUresult (*HtoDFn)(CUdeviceptr, const void*, size_t);
typedef CUresult (*DtoHFn)(void*, CUdeviceptr, size_t);

/* SIZE bytes at `p` (memory of the current context) set to a byte pattern seeded by `seed`. */
static void FillWith(HtoDFn htod, CUdeviceptr p, unsigned seed) {
  unsigned char* h = (unsigned char*)malloc(SIZE);
  for (unsigned i = 0; i < SIZE; ++i) h[i] = (unsigned char)(i * 7u + seed);
  Check("fill", htod(p, h, SIZE));
  free(h);
}

/* Prints "what same" when [dst, +n) equals [src, +n), read back through the host, else
 * "what DIFFERENT" (and the workload fails). */
static void SameWith(DtoHFn dtoh, const char* what, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  unsigned char* a = (unsigned char*)malloc(n);
  unsigned char* b = (unsigned char*)malloc(n);
  int r = dtoh(a, dst, n) | dtoh(b, src, n);
  int same = r == 0 && memcmp(a, b, n) == 0;
  printf("%s %s\n", what, same ? "same" : "DIFFERENT");
  if (!same) g_failed = 1;
  free(a);
  free(b);
}
