#pragma once

// What every GPU test case of tests/cuda/ starts with: without a usable
// device it passes with a warning naming the reason, so the suite runs
// everywhere the CUDA backend builds.

#include <catch2/catch.hpp>

#include <string>

#include "caflm/cuda/cuda_device.hpp"

/// Returns from the test case, with "skipped: <reason>", when no CUDA device
/// is usable.
#define CAFLM_REQUIRE_GPU()                                                                        \
  do {                                                                                             \
    const std::string caflm_gpu_reason = caflm::cuda::cuda_unavailable_reason();                   \
    if (!caflm_gpu_reason.empty()) {                                                               \
      WARN("skipped: " << caflm_gpu_reason);                                                       \
      return;                                                                                      \
    }                                                                                              \
  } while (false)
