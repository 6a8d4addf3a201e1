#pragma once

#include <cstdint>

#include "caflm/gguf/tensor_type.hpp"

namespace caflm {

/// A matrix as GGUF stores it: `rows` rows of `cols` elements, each row
/// contiguous and `tensor_row_bytes(type, cols)` bytes long. For a linear
/// layer's weight, rows are the output features N and cols the inputs K.
struct WeightView {
  TensorType type;
  const void* data; // [rows, cols] elements of `type`
  std::uint64_t rows;
  std::uint64_t cols;
};

} // namespace caflm
