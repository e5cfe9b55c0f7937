#include "tools/doctor/sm_copy.h"

#include <dlfcn.h>

#include "tools/doctor/cuda_loader.h"

namespace p2ptrace::cli {

// Each thread's first word (%rd4) and the stride (%rd6), in both kernels: each thread takes words
// i, i + threads, … (coalesced).
#define P2PTRACE_PTX_GRID_STRIDE \
  "  mov.u32 %r1, %ctaid.x;\n" \
  "  mov.u32 %r2, %ntid.x;\n" \
  "  mov.u32 %r3, %tid.x;\n" \
  "  mov.u32 %r4, %nctaid.x;\n" \
  "  mul.wide.u32 %rd4, %r1, %r2;\n" \
  "  cvt.u64.u32 %rd5, %r3;\n" \
  "  add.u64 %rd4, %rd4, %rd5;\n" \
  "  mul.wide.u32 %rd6, %r4, %r2;\n"

// PTX ISA 7.0 for sm_50: every driver since CUDA 11 compiles it for its GPU (ptxas checks it at build
// time: tests/unit/tools/doctor/sm_copy_test.cc).
const char kSmCopyPtx[] = R"(.version 7.0
.target sm_50
.address_size 64

.visible .entry p2ptrace_copy_words(
  .param .u64 copy_dst,
  .param .u64 copy_src,
  .param .u64 copy_words
)
{
  .reg .pred %p<2>;
  .reg .b32 %r<5>;
  .reg .b64 %rd<11>;
  ld.param.u64 %rd1, [copy_dst];
  ld.param.u64 %rd2, [copy_src];
  ld.param.u64 %rd3, [copy_words];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
)" P2PTRACE_PTX_GRID_STRIDE R"(COPY_LOOP:
  setp.ge.u64 %p1, %rd4, %rd3;
  @%p1 bra COPY_DONE;
  shl.b64 %rd7, %rd4, 3;
  add.u64 %rd8, %rd2, %rd7;
  ld.global.u64 %rd9, [%rd8];
  add.u64 %rd10, %rd1, %rd7;
  st.global.u64 [%rd10], %rd9;
  add.u64 %rd4, %rd4, %rd6;
  bra.uni COPY_LOOP;
COPY_DONE:
  ret;
}

.visible .entry p2ptrace_count_differing(
  .param .u64 count_a,
  .param .u64 count_b,
  .param .u64 count_words,
  .param .u64 count_out
)
{
  .reg .pred %p<3>;
  .reg .b32 %r<5>;
  .reg .b64 %rd<14>;
  ld.param.u64 %rd1, [count_a];
  ld.param.u64 %rd2, [count_b];
  ld.param.u64 %rd3, [count_words];
  ld.param.u64 %rd11, [count_out];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  cvta.to.global.u64 %rd11, %rd11;
)" P2PTRACE_PTX_GRID_STRIDE R"(COUNT_LOOP:
  setp.ge.u64 %p1, %rd4, %rd3;
  @%p1 bra COUNT_DONE;
  shl.b64 %rd7, %rd4, 3;
  add.u64 %rd8, %rd1, %rd7;
  ld.global.u64 %rd9, [%rd8];
  add.u64 %rd10, %rd2, %rd7;
  ld.global.u64 %rd12, [%rd10];
  setp.ne.u64 %p2, %rd9, %rd12;
  @%p2 red.global.add.u32 [%rd11], 1;
  add.u64 %rd4, %rd4, %rd6;
  bra.uni COUNT_LOOP;
COUNT_DONE:
  ret;
}
)";
#undef P2PTRACE_PTX_GRID_STRIDE

bool SmCopyKernels::Load(std::string* why) {
  // The driver the runtime already loaded, else the system's.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) {
    *why = "the CUDA driver (libcuda.so.1) could not be loaded";
    return false;
  }
  if (!BindCuda(lib, "cuCtxGetCurrent", &CtxGetCurrent) || !BindCuda(lib, "cuModuleLoadData", &ModuleLoadData) ||
      !BindCuda(lib, "cuModuleGetFunction", &ModuleGetFunction) || !BindCuda(lib, "cuLaunchKernel", &LaunchKernel)) {
    *why = "the CUDA driver lacks cuCtxGetCurrent, cuModuleLoadData, cuModuleGetFunction or cuLaunchKernel";
    return false;
  }
  return true;
}

}  // namespace p2ptrace::cli
