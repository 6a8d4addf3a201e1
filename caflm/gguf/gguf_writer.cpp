#include "caflm/gguf/gguf_writer.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

namespace caflm {

namespace {

template <typename T>
void append(std::vector<uint8_t>& out, T value) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

void append_string(std::vector<uint8_t>& out, std::string_view text) {
  append<uint64_t>(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
}

void append_array_header(std::vector<uint8_t>& out, GgufValueType element_type, uint64_t count) {
  append(out, static_cast<uint32_t>(element_type));
  append(out, count);
}

uint64_t align_up(uint64_t offset, uint64_t alignment) {
  return (offset + alignment - 1) & ~(alignment - 1);
}

} // namespace

std::vector<uint8_t>& GgufWriter::begin_entry(std::string_view key, GgufValueType type) {
  if (!keys_.emplace(key).second) {
    throw GgufError(fmt::format("GgufWriter: metadata key '{}' added twice", key));
  }
  std::vector<uint8_t>& entry = entries_.emplace_back();
  append_string(entry, key);
  append(entry, static_cast<uint32_t>(type));
  return entry;
}

void GgufWriter::add_string(std::string_view key, std::string_view value) {
  append_string(begin_entry(key, GgufValueType::STRING), value);
}

void GgufWriter::add_uint32(std::string_view key, uint32_t value) {
  const bool is_alignment = key == "general.alignment";
  if (is_alignment && (value == 0 || (value & (value - 1)) != 0)) {
    throw GgufError(fmt::format("GgufWriter: general.alignment {} is not a power of two", value));
  }
  append(begin_entry(key, GgufValueType::UINT32), value);
  if (is_alignment) {
    alignment_ = value;
  }
}

void GgufWriter::add_int32(std::string_view key, int32_t value) {
  append(begin_entry(key, GgufValueType::INT32), value);
}

void GgufWriter::add_uint64(std::string_view key, uint64_t value) {
  append(begin_entry(key, GgufValueType::UINT64), value);
}

void GgufWriter::add_float32(std::string_view key, float value) {
  append(begin_entry(key, GgufValueType::FLOAT32), value);
}

void GgufWriter::add_bool(std::string_view key, bool value) {
  append<uint8_t>(begin_entry(key, GgufValueType::BOOL), value ? 1 : 0);
}

void GgufWriter::add_raw(std::string_view key, const GgufRawValue& value) {
  if (key == "general.alignment") {
    throw GgufError("GgufWriter: set general.alignment with add_uint32");
  }
  std::vector<uint8_t>& entry = begin_entry(key, value.type);
  entry.insert(entry.end(), value.bytes, value.bytes + value.size);
}

void GgufWriter::copy_metadata(const GgufFile& source, std::string_view prefix) {
  for (std::string_view key : source.keys()) {
    if (key.substr(0, prefix.size()) == prefix) {
      add_raw(key, *source.raw_value(key));
    }
  }
}

void GgufWriter::add_string_array(std::string_view key, const std::vector<std::string>& values) {
  std::vector<uint8_t>& entry = begin_entry(key, GgufValueType::ARRAY);
  append_array_header(entry, GgufValueType::STRING, values.size());
  for (const std::string& value : values) {
    append_string(entry, value);
  }
}

void GgufWriter::add_float_array(std::string_view key, const std::vector<float>& values) {
  std::vector<uint8_t>& entry = begin_entry(key, GgufValueType::ARRAY);
  append_array_header(entry, GgufValueType::FLOAT32, values.size());
  for (float value : values) {
    append(entry, value);
  }
}

void GgufWriter::add_int32_array(std::string_view key, const std::vector<int32_t>& values) {
  std::vector<uint8_t>& entry = begin_entry(key, GgufValueType::ARRAY);
  append_array_header(entry, GgufValueType::INT32, values.size());
  for (int32_t value : values) {
    append(entry, value);
  }
}

void GgufWriter::add_tensor(std::string_view name, TensorType type, std::vector<uint64_t> dims,
                            std::vector<uint8_t> bytes) {
  if (dims.empty() || dims.size() > 4) {
    throw GgufError(fmt::format("GgufWriter: tensor '{}' has {} dimensions; 1 to 4 are supported",
                                name, dims.size()));
  }
  uint64_t n_elements = 1;
  for (uint64_t dim : dims) {
    if (dim == 0 || __builtin_mul_overflow(n_elements, dim, &n_elements)) {
      throw GgufError(
          fmt::format("GgufWriter: tensor '{}' has an empty or overflowing shape", name));
    }
  }
  if (dims[0] % tensor_block_size(type) != 0) {
    throw GgufError(fmt::format("GgufWriter: {} tensor '{}' has rows of {} elements, not a "
                                "multiple of {}",
                                to_string(type), name, dims[0], tensor_block_size(type)));
  }
  const uint64_t expected_bytes = n_elements / dims[0] * tensor_row_bytes(type, dims[0]);
  if (bytes.size() != expected_bytes) {
    throw GgufError(fmt::format("GgufWriter: tensor '{}' ({}, {} elements) needs {} bytes, got {}",
                                name, to_string(type), n_elements, expected_bytes, bytes.size()));
  }
  if (!tensor_names_.emplace(name).second) {
    throw GgufError(fmt::format("GgufWriter: tensor '{}' added twice", name));
  }
  tensors_.push_back(Tensor{std::string(name), type, std::move(dims), std::move(bytes)});
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out{'G', 'G', 'U', 'F'};
  append<uint32_t>(out, 3);
  append<uint64_t>(out, tensors_.size());
  append<uint64_t>(out, entries_.size());
  for (const std::vector<uint8_t>& entry : entries_) {
    out.insert(out.end(), entry.begin(), entry.end());
  }

  std::vector<uint64_t> offsets; // relative to the data section
  uint64_t data_size = 0;
  for (const Tensor& tensor : tensors_) {
    append_string(out, tensor.name);
    append<uint32_t>(out, static_cast<uint32_t>(tensor.dims.size()));
    for (uint64_t dim : tensor.dims) {
      append(out, dim);
    }
    append(out, static_cast<uint32_t>(tensor.type));
    data_size = align_up(data_size, alignment_);
    offsets.push_back(data_size);
    append(out, data_size);
    data_size += tensor.bytes.size();
  }

  const uint64_t data_start = align_up(out.size(), alignment_);
  // ggml pads after the last tensor as well, so ggml-based readers that read
  // the whole padded data section find every byte they expect.
  out.resize(data_start + align_up(data_size, alignment_), 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const std::vector<uint8_t>& bytes = tensors_[i].bytes;
    std::copy(bytes.begin(), bytes.end(),
              out.begin() + static_cast<ptrdiff_t>(data_start + offsets[i]));
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> image = to_bytes();
  // Written beside the target, then renamed over it: a process that maps the
  // old file keeps its (intact) inode, and no reader sees half a file.
  const std::string partial = fmt::format("{}.partial-{}", path, ::getpid());
  std::ofstream file(partial, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(image.data()),
             static_cast<std::streamsize>(image.size()));
  file.close();
  if (!file) {
    const int error = errno;
    std::remove(partial.c_str());
    throw GgufError(fmt::format("GgufWriter: cannot write '{}': {}", path, std::strerror(error)));
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(partial.c_str());
    throw GgufError(fmt::format("GgufWriter: cannot write '{}': {}", path, std::strerror(error)));
  }
}

} // namespace caflm
