#include "caflm/gguf/gguf.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the GGUF reader loads little-endian fields with memcpy");

namespace caflm {

namespace {

constexpr uint32_t kMaxValueTypeId = static_cast<uint32_t>(GgufValueType::FLOAT64);
constexpr uint32_t kMaxDims = 4; // ggml's GGML_MAX_DIMS
constexpr uint64_t kStringLengthBytes = sizeof(uint64_t);
// The smallest possible encodings bound every count by the bytes left in the
// file before anything is reserved, so a hostile count cannot force a huge
// allocation.
constexpr uint64_t kMinKeyValueBytes = kStringLengthBytes + 4 + 1; // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes =
    kStringLengthBytes + 4 + 8 + 4 + 8; // empty name, n_dims, one dim, type, offset

/// Bytes of a fixed-size value; 0 for STRING and ARRAY.
uint64_t scalar_size(GgufValueType type) {
  switch (type) {
  case GgufValueType::UINT8:
  case GgufValueType::INT8:
  case GgufValueType::BOOL:
    return 1;
  case GgufValueType::UINT16:
  case GgufValueType::INT16:
    return 2;
  case GgufValueType::UINT32:
  case GgufValueType::INT32:
  case GgufValueType::FLOAT32:
    return 4;
  case GgufValueType::UINT64:
  case GgufValueType::INT64:
  case GgufValueType::FLOAT64:
    return 8;
  case GgufValueType::STRING:
  case GgufValueType::ARRAY:
    return 0;
  }
  return 0;
}

template <typename T>
T load(const uint8_t* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

/// An integer metadata value of any width and signedness.
struct Integer {
  bool negative;
  uint64_t bits; ///< the value itself when non-negative, its int64 two's complement otherwise
};

std::optional<Integer> load_integer(GgufValueType type, const uint8_t* bytes) {
  const auto from_signed = [](int64_t value) {
    return Integer{value < 0, static_cast<uint64_t>(value)};
  };
  switch (type) {
  case GgufValueType::UINT8:
    return Integer{false, load<uint8_t>(bytes)};
  case GgufValueType::UINT16:
    return Integer{false, load<uint16_t>(bytes)};
  case GgufValueType::UINT32:
    return Integer{false, load<uint32_t>(bytes)};
  case GgufValueType::UINT64:
    return Integer{false, load<uint64_t>(bytes)};
  case GgufValueType::INT8:
    return from_signed(load<int8_t>(bytes));
  case GgufValueType::INT16:
    return from_signed(load<int16_t>(bytes));
  case GgufValueType::INT32:
    return from_signed(load<int32_t>(bytes));
  case GgufValueType::INT64:
    return from_signed(load<int64_t>(bytes));
  default:
    return std::nullopt;
  }
}

bool is_integer(GgufValueType type) {
  return scalar_size(type) != 0 && type != GgufValueType::BOOL && type != GgufValueType::FLOAT32 &&
         type != GgufValueType::FLOAT64;
}

bool is_float(GgufValueType type) {
  return type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64;
}

double load_float(GgufValueType type, const uint8_t* bytes) {
  return type == GgufValueType::FLOAT32 ? load<float>(bytes) : load<double>(bytes);
}

/// Names and keys come from untrusted files: quote them, escape what is not
/// printable ASCII and cut very long ones, so messages stay readable.
std::string quoted(std::string_view text) {
  constexpr size_t kMaxShown = 80;
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  out += text.size() > kMaxShown ? "'..." : "'";
  return out;
}

/// Where in the header a field is read, formatted only when reading fails.
struct Where {
  const char* field;
  const char* entry_kind = nullptr; ///< "metadata entry", "tensor info", or none for the header
  uint64_t index = 0;
  std::string_view name = {};

  std::string describe() const {
    if (entry_kind == nullptr) {
      return field;
    }
    if (name.data() == nullptr) {
      return fmt::format("{} of {} {}", field, entry_kind, index);
    }
    return fmt::format("{} of {} {} ({})", field, entry_kind, index, quoted(name));
  }
};

/// Reads little-endian fields from the file image, checking every read
/// against the end of the image.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size)
    : begin_(data)
    , pos_(data)
    , end_(data + size) {}

  uint64_t offset() const { return static_cast<uint64_t>(pos_ - begin_); }
  uint64_t remaining() const { return static_cast<uint64_t>(end_ - pos_); }
  const uint8_t* position() const { return pos_; }

  template <typename T>
  T read(const Where& where) {
    require(sizeof(T), where);
    const T value = load<T>(pos_);
    pos_ += sizeof(T);
    return value;
  }

  std::string_view read_string(const Where& where) {
    const uint64_t length = read<uint64_t>(where);
    if (length > remaining()) {
      throw GgufError(fmt::format("{} at byte {} claims {} bytes, but only {} bytes remain",
                                  where.describe(), offset() - kStringLengthBytes, length,
                                  remaining()));
    }
    const std::string_view text(reinterpret_cast<const char*>(pos_), length);
    pos_ += length;
    return text;
  }

  void skip(uint64_t n_bytes, const Where& where) {
    require(n_bytes, where);
    pos_ += n_bytes;
  }

 private:
  void require(uint64_t n_bytes, const Where& where) const {
    if (n_bytes > remaining()) {
      throw GgufError(fmt::format("file ends at byte {} inside {} ({} bytes needed, {} left)",
                                  offset() + remaining(), where.describe(), n_bytes, remaining()));
    }
  }

  const uint8_t* begin_;
  const uint8_t* pos_;
  const uint8_t* end_;
};

void check_bools(const uint8_t* bytes, uint64_t count, const Where& where) {
  for (uint64_t i = 0; i < count; ++i) {
    if (bytes[i] > 1) {
      throw GgufError(fmt::format("{} holds the byte {} where a bool (0 or 1) belongs",
                                  where.describe(), bytes[i]));
    }
  }
}

std::string describe_version(uint32_t version) {
  if (version == 1) {
    return "GGUF version 1 is not supported (it used 32-bit counts); convert the model again "
           "with a current llama.cpp";
  }
  // Version 3 introduced big-endian files; their version field reads byte-swapped here.
  if (version != 0 && (version & 0xffffu) == 0) {
    return fmt::format("the version field reads {:#010x}: this looks like a big-endian GGUF "
                       "file, and only little-endian files are supported",
                       version);
  }
  return fmt::format("unsupported GGUF version {} (versions 2 and 3 are supported)", version);
}

} // namespace

const char* to_string(GgufValueType type) {
  switch (type) {
  case GgufValueType::UINT8:
    return "uint8";
  case GgufValueType::INT8:
    return "int8";
  case GgufValueType::UINT16:
    return "uint16";
  case GgufValueType::INT16:
    return "int16";
  case GgufValueType::UINT32:
    return "uint32";
  case GgufValueType::INT32:
    return "int32";
  case GgufValueType::FLOAT32:
    return "float32";
  case GgufValueType::BOOL:
    return "bool";
  case GgufValueType::STRING:
    return "string";
  case GgufValueType::ARRAY:
    return "array";
  case GgufValueType::UINT64:
    return "uint64";
  case GgufValueType::INT64:
    return "int64";
  case GgufValueType::FLOAT64:
    return "float64";
  }
  return "unknown";
}

void GgufFile::Unmapper::operator()(void* address) const {
  ::munmap(address, size);
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile file;
  file.source_ = "GGUF file '" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw GgufError(fmt::format("{}: cannot open: {}", file.source_, std::strerror(errno)));
  }
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    const int error = errno;
    ::close(fd);
    throw GgufError(fmt::format("{}: cannot stat: {}", file.source_, std::strerror(error)));
  }
  if (!S_ISREG(status.st_mode) || status.st_size == 0) {
    ::close(fd);
    throw GgufError(fmt::format("{}: {}", file.source_,
                                S_ISREG(status.st_mode) ? "file is empty" : "not a regular file"));
  }
  const auto size = static_cast<size_t>(status.st_size);
  void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  // Kept open (the mapping alone would keep the file alive) to notice a
  // change to the file under the mapping.
  file.fd_ = std::unique_ptr<int, Closer>(new int(fd));
  if (address == MAP_FAILED) {
    throw GgufError(fmt::format("{}: cannot map: {}", file.source_, std::strerror(error)));
  }
  file.mapping_ = std::unique_ptr<void, Unmapper>(address, Unmapper{size});
  file.mapped_size_ = size;
  file.mapped_mtime_ns_ = status.st_mtim.tv_sec * 1000000000LL + status.st_mtim.tv_nsec;
  file.parse(static_cast<const uint8_t*>(address), size);
  return file;
}

void GgufFile::Closer::operator()(int* fd) const {
  ::close(*fd);
  delete fd;
}

std::optional<std::string> GgufFile::changed_on_disk() const {
  if (!fd_) {
    return std::nullopt;
  }
  struct stat status {};
  if (::fstat(*fd_, &status) != 0) {
    return fmt::format("{}: cannot stat: {}", source_, std::strerror(errno));
  }
  if (static_cast<uint64_t>(status.st_size) < mapped_size_) {
    return fmt::format("{} shrank from {} to {} bytes while mapped", source_, mapped_size_,
                       status.st_size);
  }
  if (status.st_mtim.tv_sec * 1000000000LL + status.st_mtim.tv_nsec != mapped_mtime_ns_) {
    return fmt::format("{} was written to while mapped", source_);
  }
  return std::nullopt;
}

GgufFile GgufFile::from_memory(const uint8_t* data, size_t size) {
  GgufFile file;
  file.source_ = "GGUF image in memory";
  file.parse(data, size);
  return file;
}

GgufFile GgufFile::from_bytes(std::vector<uint8_t> image) {
  GgufFile file;
  file.source_ = "GGUF image in memory";
  file.owned_image_ = std::make_unique<const std::vector<uint8_t>>(std::move(image));
  file.parse(file.owned_image_->data(), file.owned_image_->size());
  return file;
}

void GgufFile::parse(const uint8_t* data, size_t size) {
  try {
    if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) {
      const std::string_view start(reinterpret_cast<const char*>(data), size < 4 ? size : 4);
      throw GgufError(
          fmt::format("not a GGUF file: it starts with {} instead of 'GGUF'", quoted(start)));
    }
    Cursor in(data, size);
    in.skip(4, Where{"magic"});
    version_ = in.read<uint32_t>(Where{"version"});
    if (version_ != 2 && version_ != 3) {
      throw GgufError(describe_version(version_));
    }
    const auto tensor_count = in.read<uint64_t>(Where{"tensor count"});
    const auto kv_count = in.read<uint64_t>(Where{"metadata entry count"});

    if (kv_count > in.remaining() / kMinKeyValueBytes) {
      throw GgufError(fmt::format("header declares {} metadata entries, more than the {} bytes "
                                  "left can hold",
                                  kv_count, in.remaining()));
    }
    kvs_.reserve(kv_count);
    for (uint64_t i = 0; i < kv_count; ++i) {
      Where where{"key", "metadata entry", i};
      KeyValue kv{};
      kv.key = in.read_string(where);
      where.name = kv.key;
      where.field = "value type";
      const auto type_id = in.read<uint32_t>(where);
      if (type_id > kMaxValueTypeId) {
        throw GgufError(fmt::format("{} is {}, not a GGUF value type", where.describe(), type_id));
      }
      kv.type = static_cast<GgufValueType>(type_id);
      where.field = "value";
      const uint8_t* encoded_start = in.position();
      if (kv.type == GgufValueType::ARRAY) {
        where.field = "array element type";
        const auto element_id = in.read<uint32_t>(where);
        if (element_id > kMaxValueTypeId) {
          throw GgufError(
              fmt::format("{} is {}, not a GGUF value type", where.describe(), element_id));
        }
        kv.element_type = static_cast<GgufValueType>(element_id);
        if (kv.element_type == GgufValueType::ARRAY) {
          // ggml rejects nested arrays too, so no model file carries one.
          throw GgufError(
              fmt::format("{} is array: nested arrays are not supported", where.describe()));
        }
        where.field = "array length";
        kv.count = in.read<uint64_t>(where);
        where.field = "array";
        kv.value = in.position();
        const uint64_t element_size = scalar_size(kv.element_type);
        const uint64_t min_element_size = element_size != 0 ? element_size : kStringLengthBytes;
        if (kv.count > in.remaining() / min_element_size) {
          throw GgufError(fmt::format("{} has {} {} elements, more than the {} bytes left can hold",
                                      where.describe(), kv.count, to_string(kv.element_type),
                                      in.remaining()));
        }
        if (kv.element_type == GgufValueType::STRING) {
          for (uint64_t j = 0; j < kv.count; ++j) {
            in.read_string(where);
          }
        } else {
          if (kv.element_type == GgufValueType::BOOL) {
            check_bools(kv.value, kv.count, where);
          }
          in.skip(kv.count * element_size, where);
        }
      } else if (kv.type == GgufValueType::STRING) {
        kv.value = in.position();
        in.read_string(where);
      } else {
        kv.value = in.position();
        in.skip(scalar_size(kv.type), where);
        if (kv.type == GgufValueType::BOOL) {
          check_bools(kv.value, 1, where);
        }
      }
      kv.raw = GgufRawValue{kv.type, encoded_start,
                            static_cast<uint64_t>(in.position() - encoded_start)};
      const auto [previous, inserted] = kv_index_.emplace(kv.key, kvs_.size());
      if (!inserted) {
        throw GgufError(fmt::format("metadata key {} appears twice (entries {} and {})",
                                    quoted(kv.key), previous->second, i));
      }
      kvs_.push_back(kv);
    }

    if (const KeyValue* kv = find_key("general.alignment")) {
      if (kv->type != GgufValueType::UINT32) {
        throw GgufError(
            fmt::format("general.alignment has type {}, expected uint32", to_string(kv->type)));
      }
      const auto alignment = load<uint32_t>(kv->value);
      if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        throw GgufError(
            fmt::format("general.alignment is {}, which is not a power of two", alignment));
      }
      alignment_ = alignment;
    }

    if (tensor_count > in.remaining() / kMinTensorInfoBytes) {
      throw GgufError(fmt::format("header declares {} tensors, more than the {} bytes left can "
                                  "hold",
                                  tensor_count, in.remaining()));
    }
    std::vector<uint64_t> offsets; // relative to the data section, checked once its size is known
    offsets.reserve(tensor_count);
    tensors_.reserve(tensor_count);
    for (uint64_t i = 0; i < tensor_count; ++i) {
      Where where{"name", "tensor info", i};
      const std::string_view name = in.read_string(where);
      where.name = name;
      where.field = "dimension count";
      const auto n_dims = in.read<uint32_t>(where);
      if (n_dims == 0 || n_dims > kMaxDims) {
        throw GgufError(fmt::format("tensor {} has {} dimensions; 1 to {} are supported",
                                    quoted(name), n_dims, kMaxDims));
      }
      GgufTensorInfo info{std::string(name), TensorType::F32, {}, 1, 0, nullptr};
      where.field = "dimensions";
      for (uint32_t d = 0; d < n_dims; ++d) {
        const auto dim = in.read<uint64_t>(where);
        if (dim == 0) {
          throw GgufError(fmt::format("tensor {} has size 0 in dimension {}", quoted(name), d));
        }
        // ggml keeps sizes in int64_t, so anything past INT64_MAX is corrupt.
        if (__builtin_mul_overflow(info.n_elements, dim, &info.n_elements) ||
            info.n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          throw GgufError(
              fmt::format("tensor {} has an element count that overflows 64 bits", quoted(name)));
        }
        info.dims.push_back(dim);
      }
      where.field = "type";
      const auto type_id = in.read<uint32_t>(where);
      const std::optional<TensorType> type = tensor_type_from_id(type_id);
      if (!type) {
        throw GgufError(fmt::format("tensor {} has type {} (ggml type {}), which caflm does not "
                                    "support (supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, "
                                    "q8_0, q2_K, q3_K, q4_K, q5_K, q6_K)",
                                    quoted(name), ggml_type_name(type_id), type_id));
      }
      info.type = *type;
      if (info.dims[0] % tensor_block_size(info.type) != 0) {
        throw GgufError(fmt::format("tensor {} is {} but its rows of {} elements are not a "
                                    "multiple of the block size {}",
                                    quoted(name), to_string(info.type), info.dims[0],
                                    tensor_block_size(info.type)));
      }
      where.field = "data offset";
      offsets.push_back(in.read<uint64_t>(where));
      const auto [previous, inserted] = tensor_index_.emplace(name, tensors_.size());
      if (!inserted) {
        throw GgufError(fmt::format("tensor name {} appears twice (tensors {} and {})",
                                    quoted(name), previous->second, i));
      }
      tensors_.push_back(std::move(info));
    }

    // alignment_ < 2^32 and the offset is at most the file size: no overflow.
    const uint64_t data_start = (in.offset() + alignment_ - 1) & ~(alignment_ - 1);
    // A file without tensors (a vocabulary-only file) may end before the
    // padding of the empty data section, as llama.cpp's own files do.
    if (tensors_.empty()) {
      return;
    }
    if (data_start > size) {
      throw GgufError(fmt::format("file ends at byte {}, before the tensor data section, which "
                                  "starts at byte {} (alignment {})",
                                  size, data_start, alignment_));
    }
    const uint64_t data_size = size - data_start;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      GgufTensorInfo& info = tensors_[i];
      const uint64_t offset = offsets[i];
      // Every supported type takes at least one byte per element, so this
      // also keeps the byte count below from overflowing.
      if (info.n_elements > data_size) {
        throw GgufError(fmt::format("tensor {} has {} elements, more than the {}-byte data "
                                    "section can hold",
                                    quoted(info.name), info.n_elements, data_size));
      }
      info.n_bytes = info.n_elements / info.dims[0] * tensor_row_bytes(info.type, info.dims[0]);
      if (offset % alignment_ != 0) {
        throw GgufError(fmt::format("tensor {} has data offset {}, not a multiple of the "
                                    "alignment {}",
                                    quoted(info.name), offset, alignment_));
      }
      if (offset > data_size || info.n_bytes > data_size - offset) {
        throw GgufError(fmt::format("tensor {} needs {} bytes at data offset {}, past the end of "
                                    "the {}-byte data section",
                                    quoted(info.name), info.n_bytes, offset, data_size));
      }
      info.data = data + data_start + offset;
    }
  } catch (const GgufError& error) {
    throw GgufError(fmt::format("{}: {}", source_, error.what()));
  }
}

std::vector<std::string_view> GgufFile::keys() const {
  std::vector<std::string_view> keys;
  keys.reserve(kvs_.size());
  for (const KeyValue& kv : kvs_) {
    keys.push_back(kv.key);
  }
  return keys;
}

std::optional<GgufRawValue> GgufFile::raw_value(std::string_view key) const {
  const KeyValue* kv = find_key(key);
  if (kv == nullptr) {
    return std::nullopt;
  }
  return kv->raw;
}

const GgufFile::KeyValue* GgufFile::find_key(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

std::optional<GgufValueType> GgufFile::value_type(std::string_view key) const {
  const KeyValue* kv = find_key(key);
  return kv ? std::optional<GgufValueType>(kv->type) : std::nullopt;
}

void GgufFile::throw_type_mismatch(const KeyValue& kv, const char* expected) const {
  const std::string actual = kv.type == GgufValueType::ARRAY
                                 ? fmt::format("array of {}", to_string(kv.element_type))
                                 : to_string(kv.type);
  throw GgufError(fmt::format("{}: key {} has type {}, expected {}", source_, quoted(kv.key),
                              actual, expected));
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const KeyValue* kv = find_key(key);
  if (kv == nullptr) {
    return std::nullopt;
  }
  if (kv->type != GgufValueType::STRING) {
    throw_type_mismatch(*kv, "string");
  }
  return std::string_view(reinterpret_cast<const char*>(kv->value + kStringLengthBytes),
                          load<uint64_t>(kv->value));
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const KeyValue* kv = find_key(key);
  if (kv == nullptr) {
    return std::nullopt;
  }
  const std::optional<Integer> value = load_integer(kv->type, kv->value);
  if (!value) {
    throw_type_mismatch(*kv, "an integer");
  }
  if (value->negative) {
    throw GgufError(fmt::format("{}: key {} is {}, expected a non-negative integer", source_,
                                quoted(kv->key), static_cast<int64_t>(value->bits)));
  }
  return value->bits;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const KeyValue* kv = find_key(key);
  if (kv == nullptr) {
    return std::nullopt;
  }
  const std::optional<Integer> value = load_integer(kv->type, kv->value);
  if (!value) {
    throw_type_mismatch(*kv, "an integer");
  }
  if (!value->negative &&
      value->bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw GgufError(fmt::format("{}: key {} is {}, which does not fit in int64", source_,
                                quoted(kv->key), value->bits));
  }
  return static_cast<int64_t>(value->bits);
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const KeyValue* kv = find_key(key);
  if (kv == nullptr) {
    return std::nullopt;
  }
  if (!is_float(kv->type)) {
    throw_type_mismatch(*kv, "float32 or float64");
  }
  return load_float(kv->type, kv->value);
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const KeyValue* kv = find_key(key);
  if (kv == nullptr) {
    return std::nullopt;
  }
  if (kv->type != GgufValueType::BOOL) {
    throw_type_mismatch(*kv, "bool");
  }
  return *kv->value != 0;
}

template <typename Accepts>
const GgufFile::KeyValue* GgufFile::find_array(std::string_view key, const char* expected,
                                               Accepts accepts) const {
  const KeyValue* kv = find_key(key);
  if (kv != nullptr && (kv->type != GgufValueType::ARRAY || !accepts(kv->element_type))) {
    throw_type_mismatch(*kv, expected);
  }
  return kv;
}

std::optional<std::vector<std::string_view>>
GgufFile::get_string_array(std::string_view key) const {
  const KeyValue* kv = find_array(key, "array of string",
                                  [](GgufValueType type) { return type == GgufValueType::STRING; });
  if (kv == nullptr) {
    return std::nullopt;
  }
  std::vector<std::string_view> strings;
  strings.reserve(kv->count);
  const uint8_t* element = kv->value;
  for (uint64_t i = 0; i < kv->count; ++i) {
    const auto length = load<uint64_t>(element);
    element += kStringLengthBytes;
    strings.emplace_back(reinterpret_cast<const char*>(element), length);
    element += length;
  }
  return strings;
}

std::optional<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  const KeyValue* kv = find_array(key, "array of float32 or float64", is_float);
  if (kv == nullptr) {
    return std::nullopt;
  }
  const uint64_t stride = scalar_size(kv->element_type);
  std::vector<float> values(kv->count);
  for (uint64_t i = 0; i < kv->count; ++i) {
    values[i] = static_cast<float>(load_float(kv->element_type, kv->value + i * stride));
  }
  return values;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const KeyValue* kv = find_array(key, "array of integers", is_integer);
  if (kv == nullptr) {
    return std::nullopt;
  }
  const uint64_t stride = scalar_size(kv->element_type);
  std::vector<int64_t> values(kv->count);
  for (uint64_t i = 0; i < kv->count; ++i) {
    const Integer value = *load_integer(kv->element_type, kv->value + i * stride);
    if (!value.negative &&
        value.bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw GgufError(fmt::format("{}: element {} of key {} is {}, which does not fit in int64",
                                  source_, i, quoted(kv->key), value.bits));
    }
    values[i] = static_cast<int64_t>(value.bits);
  }
  return values;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

} // namespace caflm
