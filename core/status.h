// Errors as values for code that cannot use abseil (core is linked into the shim).
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace p2ptrace {

struct Error {
  std::string message;  // one line: what failed and why, naming the file or setting
};

template <typename T>
class Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit, like std::expected
  Expected(Error error) : v_(std::move(error)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace p2ptrace
