// libFuzzer target for the GGUF reader: any input must either open or throw
// GgufError; a crash, sanitizer report, other exception, hang or oversized
// allocation is a bug. See fuzz/CMakeLists.txt for how to build and run it.

#include "caflm/gguf/gguf.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace {

/// Calls every getter on `key`; a value of another type throws GgufError.
void read_value(const caflm::GgufFile& file, std::string_view key) {
  const auto attempt = [](auto&& get) {
    try {
      get();
    } catch (const caflm::GgufError&) {
    }
  };
  attempt([&] { file.get_string(key); });
  attempt([&] { file.get_uint(key); });
  attempt([&] { file.get_int(key); });
  attempt([&] { file.get_float(key); });
  attempt([&] { file.get_bool(key); });
  attempt([&] { file.get_string_array(key); });
  attempt([&] { file.get_float_array(key); });
  attempt([&] { file.get_int_array(key); });
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const caflm::GgufFile file = caflm::GgufFile::from_memory(data, size);
    for (std::string_view key : file.keys()) {
      read_value(file, key);
    }
    // Touch every tensor byte, so AddressSanitizer sees any range that
    // escapes the input, and check the name index agrees with the list.
    uint8_t checksum = 0;
    for (const caflm::GgufTensorInfo& tensor : file.tensors()) {
      for (uint64_t i = 0; i < tensor.n_bytes; ++i) {
        checksum ^= tensor.data[i];
      }
      if (file.find_tensor(tensor.name) != &tensor) {
        std::abort();
      }
    }
    volatile uint8_t sink = checksum;
    (void)sink;
  } catch (const caflm::GgufError&) {
  }
  return 0;
}
