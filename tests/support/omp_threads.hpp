#pragma once

#include <omp.h>

namespace caflm::testing {

/// Sets the OpenMP thread count to `n` until the end of the scope.
class OmpThreads {
 public:
  explicit OmpThreads(int n)
    : saved_(omp_get_max_threads()) {
    omp_set_num_threads(n);
  }
  ~OmpThreads() { omp_set_num_threads(saved_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

} // namespace caflm::testing
