#include "caflm/gguf/tensor_type.hpp"

#include "caflm/gguf/quant_blocks.hpp"

#include <cctype>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace caflm {

namespace {

// ggml's type names indexed by type id (ggml.c type_traits). Ids whose types
// were removed from ggml keep their historic names: old files still carry them.
constexpr const char* kGgmlTypeNames[] = {
    "f32",   "f16",        "q4_0",       "q4_1",       "q4_2",     "q4_3",     "q5_0",
    "q5_1",  "q8_0",       "q8_1",       "q2_K",       "q3_K",     "q4_K",     "q5_K",
    "q6_K",  "q8_K",       "iq2_xxs",    "iq2_xs",     "iq3_xxs",  "iq1_s",    "iq4_nl",
    "iq3_s", "iq2_s",      "iq4_xs",     "i8",         "i16",      "i32",      "i64",
    "f64",   "iq1_m",      "bf16",       "q4_0_4_4",   "q4_0_4_8", "q4_0_8_8", "tq1_0",
    "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8", "iq4_nl_8_8", "mxfp4",
};

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float float_of(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

} // namespace

const char* to_string(TensorType type) {
  switch (type) {
  case TensorType::F32:
    return "f32";
  case TensorType::F16:
    return "f16";
  case TensorType::Q4_0:
    return "q4_0";
  case TensorType::Q4_1:
    return "q4_1";
  case TensorType::Q5_0:
    return "q5_0";
  case TensorType::Q5_1:
    return "q5_1";
  case TensorType::Q8_0:
    return "q8_0";
  case TensorType::Q8_1:
    return "q8_1";
  case TensorType::Q2_K:
    return "q2_k";
  case TensorType::Q3_K:
    return "q3_k";
  case TensorType::Q4_K:
    return "q4_k";
  case TensorType::Q5_K:
    return "q5_k";
  case TensorType::Q6_K:
    return "q6_k";
  case TensorType::Q8_K:
    return "q8_k";
  case TensorType::BF16:
    return "bf16";
  }
  return "unknown";
}

std::optional<TensorType> tensor_type_from_id(uint32_t ggml_id) {
  for (TensorType type : kWeightTypes)
    if (static_cast<uint32_t>(type) == ggml_id)
      return type;
  return std::nullopt;
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (TensorType type : kWeightTypes)
    if (lower == to_string(type))
      return type;
  return std::nullopt;
}

uint64_t tensor_block_size(TensorType type) {
  switch (type) {
  case TensorType::F32:
  case TensorType::F16:
  case TensorType::BF16:
    return 1;
  case TensorType::Q4_0:
  case TensorType::Q4_1:
  case TensorType::Q5_0:
  case TensorType::Q5_1:
  case TensorType::Q8_0:
  case TensorType::Q8_1:
    return 32;
  case TensorType::Q2_K:
  case TensorType::Q3_K:
  case TensorType::Q4_K:
  case TensorType::Q5_K:
  case TensorType::Q6_K:
  case TensorType::Q8_K:
    return kQK_K;
  }
  throw std::invalid_argument("tensor_block_size: invalid tensor type");
}

uint64_t tensor_block_bytes(TensorType type) {
  switch (type) {
  case TensorType::F32:
    return 4;
  case TensorType::F16:
  case TensorType::BF16:
    return 2;
  case TensorType::Q4_0:
    return sizeof(BlockQ4_0);
  case TensorType::Q4_1:
    return sizeof(BlockQ4_1);
  case TensorType::Q5_0:
    return sizeof(BlockQ5_0);
  case TensorType::Q5_1:
    return sizeof(BlockQ5_1);
  case TensorType::Q8_0:
    return sizeof(BlockQ8_0);
  case TensorType::Q8_1:
    return sizeof(BlockQ8_1);
  case TensorType::Q2_K:
    return sizeof(BlockQ2_K);
  case TensorType::Q3_K:
    return sizeof(BlockQ3_K);
  case TensorType::Q4_K:
    return sizeof(BlockQ4_K);
  case TensorType::Q5_K:
    return sizeof(BlockQ5_K);
  case TensorType::Q6_K:
    return sizeof(BlockQ6_K);
  case TensorType::Q8_K:
    return sizeof(BlockQ8_K);
  }
  throw std::invalid_argument("tensor_block_bytes: invalid tensor type");
}

const char* ggml_type_name(uint32_t ggml_id) {
  constexpr uint32_t n_names = sizeof kGgmlTypeNames / sizeof kGgmlTypeNames[0];
  return ggml_id < n_names ? kGgmlTypeNames[ggml_id] : "unknown";
}

uint64_t tensor_row_bytes(TensorType type, uint64_t n_elements_in_row) {
  const uint64_t block_size = tensor_block_size(type);
  if (n_elements_in_row % block_size != 0) {
    throw std::invalid_argument(
        std::string(to_string(type)) + " row of " + std::to_string(n_elements_in_row) +
        " elements is not a multiple of the block size " + std::to_string(block_size));
  }
  return n_elements_in_row / block_size * tensor_block_bytes(type);
}

float f16_to_f32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exactly representable in f32.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return float_of(sign | bits_of(magnitude));
  }
  if (exponent == 0x1f) {
    return float_of(sign | 0x7f800000u | (mantissa << 13));
  }
  // Rebias the exponent from 15 to 127.
  return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float value) {
  const uint32_t bits = bits_of(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;

  if (magnitude > 0x7f800000u) {
    // NaN: keep the top payload bits and force the quiet bit so it stays a NaN.
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 is halfway between the largest half (65504) and 65536; ties go to
  // the even neighbour, which is infinity.
  if (magnitude >= 0x477ff000u) {
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  const uint32_t exponent = magnitude >> 23;
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal in units of 2^-24.
    const uint32_t shift = 126 - exponent;
    if (shift > 24) {
      return sign; // below half of 2^-24: rounds to zero
    }
    const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    uint32_t result = significand >> shift;
    const uint32_t remainder = significand & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) {
      ++result; // may carry into the smallest normal, which is the right encoding
    }
    return static_cast<uint16_t>(sign | result);
  }
  uint32_t result = ((exponent - 112) << 10) | ((magnitude >> 13) & 0x3ffu);
  const uint32_t remainder = magnitude & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) {
    ++result; // a carry out of the mantissa correctly bumps the exponent
  }
  return static_cast<uint16_t>(sign | result);
}

float bf16_to_f32(uint16_t bf16) {
  return float_of(static_cast<uint32_t>(bf16) << 16);
}

uint16_t f32_to_bf16(float value) {
  const uint32_t bits = bits_of(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

} // namespace caflm
