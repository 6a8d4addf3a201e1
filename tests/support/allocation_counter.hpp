#pragma once

// Counts the heap allocations of the test program that includes this header
// (from exactly one translation unit: it defines the program's global
// operator new and delete). Every form is replaced, array, aligned and
// nothrow ones included: a form left to the runtime would release memory
// these allocate through another allocator, which AddressSanitizer reports
// as a mismatch. They stay out of line: once inlined, GCC pairs malloc with
// operator new and warns of a mismatch.

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

// ThreadSanitizer's run-time library defines operator new and delete itself
// (statically linked with clang): the replacements would not link there.
#if defined(__SANITIZE_THREAD__)
#define CAFLM_TEST_COUNTS_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CAFLM_TEST_COUNTS_ALLOCATIONS 0
#endif
#endif
#ifndef CAFLM_TEST_COUNTS_ALLOCATIONS
#define CAFLM_TEST_COUNTS_ALLOCATIONS 1
#endif

namespace caflm::test {

/// Whether heap_allocations counts (not under ThreadSanitizer).
inline constexpr bool counts_allocations = CAFLM_TEST_COUNTS_ALLOCATIONS;

/// Heap allocations so far, by any thread.
inline std::atomic<std::size_t> heap_allocations{0};

namespace detail {

inline void* counted_allocation(std::size_t size, std::size_t alignment) noexcept {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (size == 0)
    size = 1;
  if (alignment <= alignof(std::max_align_t))
    return std::malloc(size);
  // aligned_alloc wants a multiple of the alignment.
  return std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
}

inline void* counted_or_throw(std::size_t size, std::size_t alignment) {
  if (void* memory = counted_allocation(size, alignment))
    return memory;
  throw std::bad_alloc();
}

} // namespace detail

} // namespace caflm::test

#if CAFLM_TEST_COUNTS_ALLOCATIONS

[[gnu::noinline]] void* operator new(std::size_t size) {
  return caflm::test::detail::counted_or_throw(size, 0);
}
[[gnu::noinline]] void* operator new[](std::size_t size) {
  return caflm::test::detail::counted_or_throw(size, 0);
}
[[gnu::noinline]] void* operator new(std::size_t size, std::align_val_t alignment) {
  return caflm::test::detail::counted_or_throw(size, static_cast<std::size_t>(alignment));
}
[[gnu::noinline]] void* operator new[](std::size_t size, std::align_val_t alignment) {
  return caflm::test::detail::counted_or_throw(size, static_cast<std::size_t>(alignment));
}
[[gnu::noinline]] void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return caflm::test::detail::counted_allocation(size, 0);
}
[[gnu::noinline]] void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return caflm::test::detail::counted_allocation(size, 0);
}
[[gnu::noinline]] void* operator new(std::size_t size, std::align_val_t alignment,
                                     const std::nothrow_t&) noexcept {
  return caflm::test::detail::counted_allocation(size, static_cast<std::size_t>(alignment));
}
[[gnu::noinline]] void* operator new[](std::size_t size, std::align_val_t alignment,
                                       const std::nothrow_t&) noexcept {
  return caflm::test::detail::counted_allocation(size, static_cast<std::size_t>(alignment));
}

[[gnu::noinline]] void operator delete(void* memory) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete[](void* memory) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete(void* memory, std::size_t) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete[](void* memory, std::size_t) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete(void* memory, std::align_val_t) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete[](void* memory, std::align_val_t) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete(void* memory, std::size_t, std::align_val_t) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete[](void* memory, std::size_t, std::align_val_t) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete(void* memory, const std::nothrow_t&) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete[](void* memory, const std::nothrow_t&) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete(void* memory, std::align_val_t,
                                       const std::nothrow_t&) noexcept {
  std::free(memory);
}
[[gnu::noinline]] void operator delete[](void* memory, std::align_val_t,
                                         const std::nothrow_t&) noexcept {
  std::free(memory);
}

#endif // CAFLM_TEST_COUNTS_ALLOCATIONS
