#pragma once

#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/tensor_type.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace caflm {

/// Builds a GGUF v3 file: metadata in insertion order, then tensors in
/// insertion order, each at an offset aligned to general.alignment (32 unless
/// set with add_uint32("general.alignment", n)). Invalid input (a duplicate
/// key or tensor name, a byte count that does not match the shape, an
/// alignment that is not a power of two) throws GgufError when added.
class GgufWriter {
 public:
  void add_string(std::string_view key, std::string_view value);
  void add_uint32(std::string_view key, uint32_t value);
  void add_int32(std::string_view key, int32_t value);
  void add_uint64(std::string_view key, uint64_t value);
  void add_float32(std::string_view key, float value);
  void add_bool(std::string_view key, bool value);
  void add_string_array(std::string_view key, const std::vector<std::string>& values);
  void add_float_array(std::string_view key, const std::vector<float>& values);
  void add_int32_array(std::string_view key, const std::vector<int32_t>& values);
  /// Adds a value read from another file (GgufFile::raw_value) unchanged.
  void add_raw(std::string_view key, const GgufRawValue& value);
  /// Copies every metadata entry of `source` whose key starts with `prefix`
  /// ("tokenizer." copies a tokenizer), in the source's order.
  void copy_metadata(const GgufFile& source, std::string_view prefix);

  /// `dims` in ggml order (dims[0] contiguous, 1 to 4 of them); `bytes` holds
  /// the tensor's data in `type`'s encoding and must be exactly its size.
  void add_tensor(std::string_view name, TensorType type, std::vector<uint64_t> dims,
                  std::vector<uint8_t> bytes);

  /// The complete file image.
  std::vector<uint8_t> to_bytes() const;
  /// Writes to_bytes() to `path`, replacing any file there; GgufError on I/O
  /// failure. The image is written to a file beside `path` and renamed over
  /// it, so a reader never sees a partial file, and a process that maps the
  /// file being replaced keeps reading the old one intact.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    TensorType type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> bytes;
  };

  /// Starts a metadata entry (key and type) and returns the buffer its value goes into.
  std::vector<uint8_t>& begin_entry(std::string_view key, GgufValueType type);

  std::vector<std::vector<uint8_t>> entries_; // encoded key, type and value, in order
  std::unordered_set<std::string> keys_;
  std::vector<Tensor> tensors_;
  std::unordered_set<std::string> tensor_names_;
  uint64_t alignment_ = 32;
};

} // namespace caflm
