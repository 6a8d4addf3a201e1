#pragma once

#include <cassert>
#include <type_traits>
#include <utility>

namespace caflm {

/// A value or an error, for the allocation-free hot paths where exceptions
/// would hide control flow (a small stand-in for C++23's std::expected).
template <class T, class E>
class [[nodiscard]] Expected {
 public:
  static_assert(std::is_trivially_copyable_v<T>, "values on the hot path are plain data");
  static_assert(std::is_trivially_copyable_v<E>, "errors are plain codes");

  Expected(T value)
    : has_value_(true)
    , value_(std::move(value)) {}
  Expected(E error)
    : has_value_(false)
    , error_(error) {}

  bool has_value() const { return has_value_; }
  explicit operator bool() const { return has_value_; }

  const T& value() const {
    assert(has_value_);
    return value_;
  }
  const T& operator*() const { return value(); }
  const T* operator->() const { return &value(); }

  E error() const {
    assert(!has_value_);
    return error_;
  }

 private:
  bool has_value_;
  union {
    T value_;
    E error_;
  };
};

/// Success or an error code.
template <class E>
class [[nodiscard]] Expected<void, E> {
 public:
  Expected()
    : has_value_(true)
    , error_() {}
  Expected(E error)
    : has_value_(false)
    , error_(error) {}

  bool has_value() const { return has_value_; }
  explicit operator bool() const { return has_value_; }

  E error() const {
    assert(!has_value_);
    return error_;
  }

 private:
  bool has_value_;
  E error_;
};

} // namespace caflm
