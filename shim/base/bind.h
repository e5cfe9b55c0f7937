// The shim's one binding layer: every real function it calls (a CUDA runtime's, per version node;
// the driver's; NCCL's; the C library's) is found here by (name, library), held in a RealFunction,
// and forgotten here when its library is unloaded. Every exported wrapper has one shape,
// P2PTRACE_WRAPPER, instantiated from the function lists (interpose/*_functions.h).
#pragma once

#include <atomic>
#include <mutex>

namespace p2ptrace::shim {

// The CUDA runtime version nodes wrappers are emitted for, and the driver (libcuda.so.1, no symbol
// versions): a "runtime" of its own whose table the shim fills with driver calls (cuda_runtime.h).
enum class Node : int { kCudart11 = 0, kCudart12 = 1, kCudart13 = 2, kDriver = 3, kCount = 4 };

// Where a real function lives: a CUDA node (the same values), NCCL or the C library.
enum class Library : int { kCudart11 = 0, kCudart12, kCudart13, kDriver, kNccl, kLibc, kCount };
constexpr Library LibraryOf(Node n) { return static_cast<Library>(n); }

// "libcudart.so.11.0", "libcudart.so.12", "libcudart.so.13", "libcuda.so.1", "libnccl.so", "libc".
const char* LibraryName(Library lib);

// The real `name` of `lib`, or null when there is none; never aborts, keeps errno.
//   CUDA:  dlvsym(RTLD_NEXT, name, node) → dlsym(RTLD_NEXT, name) → the loaded library of that
//          major, found with dl_iterate_phdr and dlopen(RTLD_NOLOAD) (RTLD_NEXT sees nothing when
//          it was loaded RTLD_LOCAL, e.g. by Python ctypes or XLA).
//   NCCL:  pncclX before ncclX (NCCL before 2.16 has no p-names), searched the same way.
//   libc:  dlsym(RTLD_NEXT, name).
// The first function found of a library is its anchor: it tells when the library is unloaded.
void* ResolveReal(const char* name, Library lib);
inline void* ResolveReal(const char* name, Node node) { return ResolveReal(name, LibraryOf(node)); }

// One real function, found at its first use and kept until its library is unloaded. constinit:
// a wrapper may run before any constructor.
class RealFunction {
 public:
  constexpr RealFunction(const char* name, Library lib) : name_(name), lib_(lib) {}
  RealFunction(const RealFunction&) = delete;
  RealFunction& operator=(const RealFunction&) = delete;

  // Null until found: the wrappers' common path is this one load.
  void* cached() const { return fn_.load(std::memory_order_acquire); }
  // Finds it now (out of line) unless known; null when the library has no such function.
  void* Find();
  void* Get() {
    void* fn = cached();
    return __builtin_expect(fn != nullptr, 1) ? fn : Find();
  }
  template <typename F>
  F As() {
    return reinterpret_cast<F>(Get());
  }
  const char* name() const { return name_; }

 private:
  friend void ForgetLibrary(Library lib);
  const char* name_;
  Library lib_;
  std::atomic<void*> fn_{nullptr};
  std::atomic<bool> listed_{false};
  RealFunction* next_ = nullptr;  // the registry's list: set once, before this one is listed
};

// Whether a function of `lib` was found and the library it came from is no longer loaded there.
bool LibraryUnloaded(Library lib);
// Every RealFunction of `lib` forgotten, and its anchor: each is found again at its next use.
// Called under UnloadMutex().
void ForgetLibrary(Library lib);

// Held by the shim while it calls into a runtime on its own (timing events), and around the real
// dlclose: a library is never unloaded under a call of the shim's own. Recursive: a library's
// destructor may dlclose. Never destroyed (dlclose may run during exit); locked across fork.
std::recursive_mutex& UnloadMutex();

}  // namespace p2ptrace::shim

// The shape of every exported wrapper, whatever the library: `symbol`, with the C parameters
// `params` and arguments `args` (both in parentheses), returns `hook_call`, an expression of
// `p2p_real` (the real function, as type Fn) and the arguments, once `slot` (a RealFunction) holds the real
// function. The first call finds it out of line and then evaluates `first`, so that the common
// path is one load and the hook, with no call to keep registers across. A library without the
// function answers `missing`.
#define P2PTRACE_WRAPPER(Ret, symbol, slot, Fn, missing, first, hook_call, params, args) \
  __attribute__((noinline, cold)) static Ret p2p_first_##symbol params {                \
    auto p2p_real = reinterpret_cast<Fn>((slot).Find());                                \
    if (p2p_real == nullptr) return missing;                                            \
    first;                                                                              \
    return hook_call;                                                                   \
  }                                                                                     \
  extern "C" __attribute__((visibility("default"))) Ret symbol params {                 \
    void* p2p_cached = (slot).cached();                                                 \
    if (__builtin_expect(p2p_cached == nullptr, 0)) return p2p_first_##symbol args;     \
    auto p2p_real = reinterpret_cast<Fn>(p2p_cached);                                   \
    return hook_call;                                                                   \
  }
#define P2PTRACE_UNPAREN(...) __VA_ARGS__
