#pragma once

#include "caflm/gguf/tensor_type.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace caflm {

/// Any problem with a GGUF file: unreadable, truncated, corrupt, unsupported,
/// or a metadata value of an unexpected type. The message says what and where.
class GgufError : public std::runtime_error {
  using runtime_error::runtime_error;
};

/// Metadata value types, numbered as in the GGUF specification.
enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

/// Lower-case name of a value type: "uint32", "string", "array", ...
const char* to_string(GgufValueType type);

/// One tensor of a GGUF file, validated at open: its type is supported and its
/// bytes lie inside the file.
struct GgufTensorInfo {
  std::string name;
  TensorType type;
  std::vector<uint64_t> dims; ///< ggml order: dims[0] is the contiguous (fastest) dimension
  uint64_t n_elements;
  uint64_t n_bytes;
  const uint8_t* data; ///< points into the file; offset from the file start is a multiple of the
                       ///< alignment
};

/// One metadata value exactly as a file encodes it after its key and type
/// (an array: element type, length, elements), for copying entries from one
/// file to a GgufWriter unchanged. Points into the file image.
struct GgufRawValue {
  GgufValueType type;
  const uint8_t* bytes;
  uint64_t size;
};

/// A GGUF v2/v3 file, read-only. Opening validates the whole header (every
/// length, count, type and tensor range), so a file that opens can be read
/// without further bounds checks; tensor data is not copied.
class GgufFile {
 public:
  /// Maps `path` read-only. Throws GgufError if it cannot be read or is not a
  /// valid, supported GGUF file. The file must not be truncated while open.
  static GgufFile open(const std::string& path);

  /// Parses a GGUF image already in memory without copying it; the caller keeps
  /// `data` alive and unchanged for the lifetime of the result.
  static GgufFile from_memory(const uint8_t* data, size_t size);

  /// Parses a GGUF image that the result owns (GgufWriter::to_bytes, say).
  static GgufFile from_bytes(std::vector<uint8_t> image);

  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile() = default;

  uint32_t version() const { return version_; }
  /// general.alignment, or 32 when the file does not set it.
  uint64_t alignment() const { return alignment_; }

  /// Metadata keys in file order.
  std::vector<std::string_view> keys() const;
  bool has_key(std::string_view key) const { return find_key(key) != nullptr; }
  /// Type of the value stored under `key`, nullopt when absent.
  std::optional<GgufValueType> value_type(std::string_view key) const;
  /// The value under `key` as encoded, nullopt when absent.
  std::optional<GgufRawValue> raw_value(std::string_view key) const;

  // Typed getters: nullopt when the key is absent; GgufError naming the key
  // and both types when the value has another type.
  std::optional<std::string_view> get_string(std::string_view key) const;
  /// Any integer type; GgufError if the value is negative.
  std::optional<uint64_t> get_uint(std::string_view key) const;
  /// Any integer type; GgufError if a uint64 value exceeds INT64_MAX.
  std::optional<int64_t> get_int(std::string_view key) const;
  /// FLOAT32 or FLOAT64.
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  /// Array of FLOAT32 or FLOAT64 (narrowed to float).
  std::optional<std::vector<float>> get_float_array(std::string_view key) const;
  /// Array of any integer type; GgufError if a uint64 element exceeds INT64_MAX.
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

  /// For a file from open(): why its bytes on disk are no longer the mapped
  /// ones (it shrank, or was written in place), or nullopt while they are.
  /// Reading a mapping whose file shrank raises SIGBUS, so a long-running
  /// reader checks this between uses. Replacing the file by renaming a new
  /// one over its path changes nothing here: the mapping keeps the old one.
  std::optional<std::string> changed_on_disk() const;

  /// nullptr when there is no tensor of that name.
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  /// Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

 private:
  /// A validated metadata entry; the views point into the file image.
  struct KeyValue {
    std::string_view key;
    GgufValueType type;
    GgufValueType element_type; ///< arrays only
    uint64_t count;             ///< arrays only: number of elements
    const uint8_t* value;       ///< scalars: the value; arrays: the first element
    GgufRawValue raw;           ///< the encoded value, from the type on
  };

  struct Unmapper {
    size_t size;
    void operator()(void* address) const;
  };

  GgufFile() = default;
  void parse(const uint8_t* data, size_t size);
  const KeyValue* find_key(std::string_view key) const;
  /// The entry under `key` if it is an array, checking its element type with `accepts`.
  template <typename Accepts>
  const KeyValue* find_array(std::string_view key, const char* expected, Accepts accepts) const;
  [[noreturn]] void throw_type_mismatch(const KeyValue& kv, const char* expected) const;

  struct Closer {
    void operator()(int* fd) const;
  };

  std::unique_ptr<void, Unmapper> mapping_{nullptr, Unmapper{0}};
  /// open() only: the mapped file, kept open to watch it, and its size and
  /// modification time when it was mapped.
  std::unique_ptr<int, Closer> fd_;
  uint64_t mapped_size_ = 0;
  int64_t mapped_mtime_ns_ = 0;
  std::unique_ptr<const std::vector<uint8_t>> owned_image_; ///< from_bytes only
  std::string source_; ///< path, or "<memory>", for error messages
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<KeyValue> kvs_;
  std::unordered_map<std::string_view, size_t> kv_index_; // key -> index into kvs_
  std::vector<GgufTensorInfo> tensors_;
  // Views into the file image, which never moves, so moving a GgufFile keeps them valid.
  std::unordered_map<std::string_view, size_t> tensor_index_; // name -> index into tensors_
};

} // namespace caflm
