// A driver call that may never return (NVML on a wedged GPU) runs on a helper thread the caller
// waits for with a deadline: past it the caller goes on, and the thread, which owns what it uses,
// finishes or not on its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace p2ptrace::probe {

// What `work()` returned, or nullopt when it did not within `ms` milliseconds (or no thread could
// be started). `work` is moved to the thread: it must own everything it touches.
template <typename Work>
auto WithDeadline(Work work, int ms) -> std::optional<decltype(work())> {
  using T = decltype(work());
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<T> result;
  };
  auto shared = std::make_shared<Shared>();
  try {
    std::thread([shared, work = std::move(work)]() mutable {
      T r = work();
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->result = std::move(r);
      shared->cv.notify_all();
    }).detach();
  } catch (...) {
    return std::nullopt;
  }
  std::unique_lock<std::mutex> lock(shared->mu);
  if (!shared->cv.wait_for(lock, std::chrono::milliseconds(ms), [&] { return shared->result.has_value(); }))
    return std::nullopt;
  return std::move(shared->result);
}

}  // namespace p2ptrace::probe
