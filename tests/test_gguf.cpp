#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/gguf_writer.hpp"
#include "caflm/gguf/quant_blocks.hpp"
#include "caflm/gguf/tensor_type.hpp"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#ifdef __F16C__
#include <immintrin.h>
#endif

using caflm::GgufError;
using caflm::GgufFile;
using caflm::GgufRawValue;
using caflm::GgufValueType;
using caflm::GgufWriter;
using caflm::TensorType;
using Catch::Matchers::Contains;

namespace {

const std::string kTinyModel = CAFLM_TESTDATA_DIR "/models/tiny-llama-f32.gguf";

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

/// Byte pattern 0, 1, 2, ... so every tensor's bytes are distinguishable.
std::vector<uint8_t> pattern(size_t n_bytes, uint8_t start) {
  std::vector<uint8_t> bytes(n_bytes);
  for (size_t i = 0; i < n_bytes; ++i) {
    bytes[i] = static_cast<uint8_t>(start + i);
  }
  return bytes;
}

/// Little-endian GGUF fields appended by hand, for files the writer refuses to make.
struct RawGguf {
  std::vector<uint8_t> bytes;

  template <typename T>
  RawGguf& put(T value) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
    return *this;
  }
  RawGguf& str(std::string_view text) {
    put<uint64_t>(text.size());
    bytes.insert(bytes.end(), text.begin(), text.end());
    return *this;
  }
  RawGguf& header(uint64_t n_tensors, uint64_t n_kvs) {
    bytes = {'G', 'G', 'U', 'F'};
    return put<uint32_t>(3).put(n_tensors).put(n_kvs);
  }
  RawGguf& key(std::string_view name, GgufValueType type) {
    return str(name).put(static_cast<uint32_t>(type));
  }
  RawGguf& array(std::string_view name, GgufValueType element_type, uint64_t count) {
    return key(name, GgufValueType::ARRAY).put(static_cast<uint32_t>(element_type)).put(count);
  }
  /// Pads to the default alignment, where the data section starts.
  RawGguf& pad() {
    bytes.resize((bytes.size() + 31) / 32 * 32, 0);
    return *this;
  }
};

/// Offset of the first occurrence of `text` in `image`.
size_t offset_of(const std::vector<uint8_t>& image, std::string_view text) {
  const auto it = std::search(image.begin(), image.end(), text.begin(), text.end());
  REQUIRE(it != image.end());
  return static_cast<size_t>(it - image.begin());
}

template <typename T>
void poke(std::vector<uint8_t>& image, size_t offset, T value) {
  REQUIRE(offset + sizeof(T) <= image.size());
  std::memcpy(image.data() + offset, &value, sizeof(T));
}

/// The message GgufFile::from_memory fails with; fails the test if it opens.
std::string open_error(const std::vector<uint8_t>& image) {
  try {
    GgufFile::from_memory(image.data(), image.size());
  } catch (const GgufError& error) {
    return error.what();
  }
  FAIL("the image opened without error");
  return {};
}

/// A small file with one entry of every writer value type and two tensors.
/// The last tensor is 32 bytes long, so the file ends exactly where its data
/// does: no byte of the file is optional.
GgufWriter small_writer() {
  GgufWriter writer;
  writer.add_string("general.architecture", "llama");
  writer.add_uint32("test.u32", 7);
  writer.add_int32("test.i32", -7);
  writer.add_uint64("test.u64", 1ull << 40);
  writer.add_float32("test.f32", 0.5f);
  writer.add_bool("test.flag_a", true);
  writer.add_bool("test.flag_b", false);
  writer.add_string_array("test.strings", {"a", "bc", ""});
  writer.add_float_array("test.floats", {1.0f, -2.5f});
  writer.add_int32_array("test.ints", {3, -4});
  writer.add_tensor("blk.0.attn_q.weight", TensorType::F32, {3, 2},
                    bytes_of(std::vector<float>{1, 2, 3, 4, 5, 6}));
  writer.add_tensor("blk.0.attn_k.weight", TensorType::F32, {8}, pattern(32, 0));
  return writer;
}

// Offsets of a tensor info's fields, found from its name in the image.
struct TensorInfoFields {
  size_t n_dims, dims, type, offset;
};

TensorInfoFields tensor_fields(const std::vector<uint8_t>& image, std::string_view name,
                               uint32_t n_dims) {
  const size_t n_dims_at = offset_of(image, name) + name.size();
  const size_t dims_at = n_dims_at + 4;
  const size_t type_at = dims_at + 8 * n_dims;
  return {n_dims_at, dims_at, type_at, type_at + 4};
}

} // namespace

TEST_CASE("reads the tiny llama model's metadata and tensors", "[gguf]") {
  const GgufFile file = GgufFile::open(kTinyModel);
  CHECK(file.version() == 3);
  CHECK(file.alignment() == 32);
  CHECK(file.get_string("general.architecture") == "llama");
  CHECK(file.get_uint("llama.embedding_length") == 64u);
  CHECK(file.get_uint("llama.block_count") == 2u);
  CHECK(file.get_uint("llama.attention.head_count") == 4u);
  CHECK(file.get_uint("llama.attention.head_count_kv") == 2u);
  CHECK(file.get_uint("llama.feed_forward_length") == 192u);
  CHECK(file.get_int("llama.context_length") == 2048);
  CHECK(file.get_float("llama.attention.layer_norm_rms_epsilon").value() ==
        Approx(1e-5).epsilon(1e-6));
  CHECK(file.get_float("llama.rope.freq_base") == 10000.0);
  CHECK(file.get_bool("tokenizer.ggml.add_bos_token") == true);
  CHECK(file.get_bool("tokenizer.ggml.add_eos_token") == false);
  CHECK_FALSE(file.has_key("llama.no_such_key"));
  CHECK_FALSE(file.get_uint("llama.no_such_key"));
  CHECK(file.value_type("tokenizer.ggml.tokens") == GgufValueType::ARRAY);
  CHECK(file.keys().size() == 24);
  CHECK(file.keys().front() == "general.architecture");

  const auto tokens = file.get_string_array("tokenizer.ggml.tokens").value();
  REQUIRE(tokens.size() == 32000);
  CHECK(tokens[0] == "<unk>");
  CHECK(tokens[1] == "<s>");
  CHECK(tokens[2] == "</s>");
  CHECK(file.get_float_array("tokenizer.ggml.scores").value().size() == 32000);
  const auto token_types = file.get_int_array("tokenizer.ggml.token_type").value();
  REQUIRE(token_types.size() == 32000);
  CHECK(token_types[0] == 2);
  CHECK(token_types[1] == 3);

  REQUIRE(file.tensors().size() == 21);
  const caflm::GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  REQUIRE(embd != nullptr);
  CHECK(embd == &file.tensors().front());
  CHECK(embd->type == TensorType::F32);
  CHECK(embd->dims == std::vector<uint64_t>{64, 32000});
  CHECK(embd->n_elements == 64 * 32000);
  CHECK(embd->n_bytes == 64 * 32000 * 4);
  CHECK(reinterpret_cast<uintptr_t>(embd->data) % 32 == 0);
  const caflm::GgufTensorInfo* down = file.find_tensor("blk.1.ffn_down.weight");
  REQUIRE(down != nullptr);
  CHECK(down->dims == std::vector<uint64_t>{192, 64});
  CHECK(file.find_tensor("blk.0.attn_norm.weight")->dims == std::vector<uint64_t>{64});
  CHECK(file.find_tensor("blk.2.attn_q.weight") == nullptr);
  const caflm::GgufTensorInfo& output = file.tensors().back();
  CHECK(output.name == "output.weight");
  CHECK(output.dims == std::vector<uint64_t>{64, 32000});

  // The same file parsed from memory: tensor data sits where an independent
  // reading of the header (tensor infos end at byte 725164, padded to 725184)
  // puts it, and matches the mapped bytes.
  const std::vector<uint8_t> image = read_file(kTinyModel);
  const GgufFile in_memory = GgufFile::from_memory(image.data(), image.size());
  const caflm::GgufTensorInfo& output_in_memory = in_memory.tensors().back();
  CHECK(output_in_memory.data - image.data() == 725184 + 8586496);
  CHECK(output_in_memory.data + output_in_memory.n_bytes <= image.data() + image.size());
  CHECK(std::memcmp(output_in_memory.data, output.data, output.n_bytes) == 0);
}

TEST_CASE("getters name the key and both types on a type mismatch", "[gguf]") {
  const GgufFile file = GgufFile::open(kTinyModel);
  CHECK_THROWS_WITH(file.get_string("llama.block_count"),
                    Contains("llama.block_count") && Contains("uint32") && Contains("string"));
  CHECK_THROWS_WITH(file.get_uint("general.architecture"),
                    Contains("general.architecture") && Contains("string") && Contains("integer"));
  CHECK_THROWS_WITH(file.get_float("llama.block_count"), Contains("float32"));
  CHECK_THROWS_WITH(file.get_bool("llama.rope.freq_base"), Contains("float32") && Contains("bool"));
  CHECK_THROWS_WITH(file.get_float_array("tokenizer.ggml.tokens"),
                    Contains("tokenizer.ggml.tokens") && Contains("array of string") &&
                        Contains("array of float32"));
  CHECK_THROWS_WITH(file.get_string_array("general.name"),
                    Contains("general.name") && Contains("array of string"));
  CHECK_THROWS_WITH(file.get_int_array("tokenizer.ggml.scores"), Contains("array of float32"));
}

TEST_CASE("the writer round-trips every value type and tensor type", "[gguf][writer]") {
  GgufWriter writer;
  writer.add_string("s", "h\xc3\xa9llo");
  writer.add_string("empty", "");
  writer.add_uint32("u32", 4000000000u);
  writer.add_int32("i32", -123456);
  writer.add_uint64("u64", std::numeric_limits<uint64_t>::max());
  writer.add_float32("f32", -1.25f);
  writer.add_bool("yes", true);
  writer.add_bool("no", false);
  writer.add_string_array("strings", {"x", "", "yz"});
  writer.add_string_array("no_strings", {});
  writer.add_float_array("floats", {0.5f, -3.0f, 1e30f});
  writer.add_int32_array("ints", {-1, 0, std::numeric_limits<int32_t>::max()});

  const std::vector<uint8_t> f32 = bytes_of(std::vector<float>{1, -2, 3, -4, 5, -6});
  const std::vector<uint8_t> f16 = pattern(5 * 2, 10); // odd size: the next tensor needs padding
  const std::vector<uint8_t> bf16 = pattern(4 * 2 * 3 * 2, 50);
  const std::vector<uint8_t> q8_0 = pattern(2 * 2 * sizeof(caflm::BlockQ8_0), 90);
  writer.add_tensor("a.f32", TensorType::F32, {3, 2}, f32);
  writer.add_tensor("b.f16", TensorType::F16, {5}, f16);
  writer.add_tensor("c.bf16", TensorType::BF16, {4, 2, 3}, bf16);
  writer.add_tensor("d.q8_0", TensorType::Q8_0, {64, 2}, q8_0);

  const std::vector<uint8_t> image = writer.to_bytes();
  const GgufFile file = GgufFile::from_memory(image.data(), image.size());
  CHECK(file.version() == 3);
  CHECK(file.alignment() == 32);
  CHECK(file.get_string("s") == "h\xc3\xa9llo");
  CHECK(file.get_string("empty") == "");
  CHECK(file.get_uint("u32") == 4000000000u);
  CHECK(file.get_int("u32") == 4000000000);
  CHECK(file.get_int("i32") == -123456);
  CHECK_THROWS_WITH(file.get_uint("i32"), Contains("i32") && Contains("-123456"));
  CHECK(file.get_uint("u64") == std::numeric_limits<uint64_t>::max());
  CHECK_THROWS_WITH(file.get_int("u64"), Contains("u64") && Contains("int64"));
  CHECK(file.get_float("f32") == -1.25);
  CHECK(file.get_bool("yes") == true);
  CHECK(file.get_bool("no") == false);
  CHECK(file.get_string_array("strings") == std::vector<std::string_view>{"x", "", "yz"});
  CHECK(file.get_string_array("no_strings") == std::vector<std::string_view>{});
  CHECK(file.get_float_array("floats") == std::vector<float>{0.5f, -3.0f, 1e30f});
  CHECK(file.get_int_array("ints") ==
        std::vector<int64_t>{-1, 0, std::numeric_limits<int32_t>::max()});
  CHECK(file.keys() == std::vector<std::string_view>{"s", "empty", "u32", "i32", "u64", "f32",
                                                     "yes", "no", "strings", "no_strings", "floats",
                                                     "ints"});

  struct Expected {
    const char* name;
    TensorType type;
    std::vector<uint64_t> dims;
    uint64_t n_elements;
    const std::vector<uint8_t>* bytes;
  };
  const std::vector<Expected> expected = {
      {"a.f32", TensorType::F32, {3, 2}, 6, &f32},
      {"b.f16", TensorType::F16, {5}, 5, &f16},
      {"c.bf16", TensorType::BF16, {4, 2, 3}, 24, &bf16},
      {"d.q8_0", TensorType::Q8_0, {64, 2}, 128, &q8_0},
  };
  REQUIRE(file.tensors().size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const caflm::GgufTensorInfo& tensor = file.tensors()[i];
    INFO(expected[i].name);
    CHECK(tensor.name == expected[i].name);
    CHECK(file.find_tensor(expected[i].name) == &tensor);
    CHECK(tensor.type == expected[i].type);
    CHECK(tensor.dims == expected[i].dims);
    CHECK(tensor.n_elements == expected[i].n_elements);
    REQUIRE(tensor.n_bytes == expected[i].bytes->size());
    CHECK(std::memcmp(tensor.data, expected[i].bytes->data(), tensor.n_bytes) == 0);
    CHECK((tensor.data - image.data()) % 32 == 0);
  }
}

TEST_CASE("the writer honours general.alignment and writes files open() reads", "[gguf][writer]") {
  GgufWriter writer;
  writer.add_uint32("general.alignment", 64);
  writer.add_tensor("first", TensorType::F16, {3}, pattern(6, 1));
  writer.add_tensor("second", TensorType::F32, {2}, pattern(8, 100));

  const auto path = std::filesystem::temp_directory_path() /
                    ("caflm_test_gguf_" + std::to_string(::getpid()) + ".gguf");
  writer.write(path.string());
  const GgufFile file = GgufFile::open(path.string());
  std::filesystem::remove(path);

  CHECK(file.alignment() == 64);
  REQUIRE(file.tensors().size() == 2);
  CHECK(file.tensors()[1].data - file.tensors()[0].data == 64);
  CHECK(reinterpret_cast<uintptr_t>(file.tensors()[0].data) % 64 == 0);
  CHECK(std::memcmp(file.tensors()[1].data, pattern(8, 100).data(), 8) == 0);
}

TEST_CASE("the writer refuses inconsistent input", "[gguf][writer]") {
  GgufWriter writer;
  writer.add_uint32("k", 1);
  CHECK_THROWS_WITH(writer.add_string("k", "again"), Contains("'k'") && Contains("twice"));
  CHECK_THROWS_WITH(writer.add_uint32("general.alignment", 24), Contains("power of two"));
  CHECK_THROWS_WITH(writer.add_tensor("t", TensorType::F32, {4}, pattern(15, 0)),
                    Contains("16 bytes") && Contains("got 15"));
  CHECK_THROWS_WITH(writer.add_tensor("t", TensorType::Q8_0, {16}, pattern(17, 0)),
                    Contains("multiple of 32"));
  CHECK_THROWS_WITH(writer.add_tensor("t", TensorType::F32, {1, 1, 1, 1, 1}, pattern(4, 0)),
                    Contains("5 dimensions"));
  writer.add_tensor("t", TensorType::F32, {1}, pattern(4, 0));
  CHECK_THROWS_WITH(writer.add_tensor("t", TensorType::F32, {1}, pattern(4, 0)), Contains("twice"));
  CHECK_THROWS_WITH(writer.write("/nonexistent/dir/model.gguf"),
                    Contains("cannot write '/nonexistent/dir/model.gguf'"));
}

TEST_CASE("the reader decodes every GGUF value type", "[gguf]") {
  RawGguf raw;
  raw.header(0, 12);
  raw.key("u8", GgufValueType::UINT8).put<uint8_t>(200);
  raw.key("i8", GgufValueType::INT8).put<int8_t>(-100);
  raw.key("u16", GgufValueType::UINT16).put<uint16_t>(60000);
  raw.key("i16", GgufValueType::INT16).put<int16_t>(-30000);
  raw.key("i64", GgufValueType::INT64).put<int64_t>(-(int64_t{1} << 50));
  raw.key("f64", GgufValueType::FLOAT64).put<double>(0.1);
  raw.array("u8s", GgufValueType::UINT8, 2).put<uint8_t>(1).put<uint8_t>(255);
  raw.array("i16s", GgufValueType::INT16, 1).put<int16_t>(-2);
  raw.array("u64s", GgufValueType::UINT64, 1).put<uint64_t>(1ull << 63);
  raw.array("f64s", GgufValueType::FLOAT64, 2).put<double>(0.25).put<double>(-8.0);
  raw.array("bools", GgufValueType::BOOL, 2).put<uint8_t>(0).put<uint8_t>(1);
  raw.key("u64_small", GgufValueType::UINT64).put<uint64_t>(5);
  raw.pad();

  const GgufFile file = GgufFile::from_memory(raw.bytes.data(), raw.bytes.size());
  CHECK(file.get_uint("u8") == 200u);
  CHECK(file.get_int("i8") == -100);
  CHECK(file.get_uint("u16") == 60000u);
  CHECK(file.get_int("i16") == -30000);
  CHECK(file.get_int("i64") == -(int64_t{1} << 50));
  CHECK(file.get_int("u64_small") == 5);
  CHECK(file.get_float("f64") == 0.1);
  CHECK(file.get_int_array("u8s") == std::vector<int64_t>{1, 255});
  CHECK(file.get_int_array("i16s") == std::vector<int64_t>{-2});
  CHECK_THROWS_WITH(file.get_int_array("u64s"), Contains("u64s") && Contains("int64"));
  CHECK(file.get_float_array("f64s") == std::vector<float>{0.25f, -8.0f});
  CHECK_THROWS_WITH(file.get_int_array("bools"), Contains("array of bool"));
  CHECK(file.value_type("f64") == GgufValueType::FLOAT64);
  CHECK_FALSE(file.value_type("missing"));
  CHECK(file.tensors().empty());
}

TEST_CASE("GGUF version 2 opens, version 1 and others are refused", "[gguf]") {
  std::vector<uint8_t> image = small_writer().to_bytes();
  poke<uint32_t>(image, 4, 2);
  CHECK(GgufFile::from_memory(image.data(), image.size()).version() == 2);
  poke<uint32_t>(image, 4, 1);
  CHECK_THAT(open_error(image), Contains("version 1 is not supported"));
  poke<uint32_t>(image, 4, 4);
  CHECK_THAT(open_error(image), Contains("unsupported GGUF version 4"));
  poke<uint32_t>(image, 4, 3u << 24); // version 3 as a big-endian file stores it
  CHECK_THAT(open_error(image), Contains("big-endian"));
  poke<uint32_t>(image, 0, 0x47475546); // "FUGG"
  CHECK_THAT(open_error(image), Contains("not a GGUF file"));
}

TEST_CASE("every truncation of a valid file is an error, not a crash", "[gguf]") {
  const std::vector<uint8_t> image = small_writer().to_bytes();
  {
    const GgufFile file = GgufFile::from_memory(image.data(), image.size());
    const caflm::GgufTensorInfo& last = file.tensors().back();
    REQUIRE(last.data + last.n_bytes == image.data() + image.size());
  }
  for (size_t length = 0; length < image.size(); ++length) {
    // An exactly sized copy, so a sanitizer build catches any read past the end.
    const std::vector<uint8_t> truncated(image.begin(), image.begin() + length);
    INFO("length " << length);
    CHECK_THROWS_AS(GgufFile::from_memory(truncated.data(), truncated.size()), GgufError);
  }
}

TEST_CASE("corrupted header fields give errors that say what is wrong", "[gguf]") {
  const std::vector<uint8_t> valid = small_writer().to_bytes();
  std::vector<uint8_t> image = valid;

  SECTION("counts larger than the file") {
    poke<uint64_t>(image, 16, uint64_t{1} << 60);
    CHECK_THAT(open_error(image), Contains("1152921504606846976 metadata entries"));
    image = valid;
    poke<uint64_t>(image, 8, uint64_t{1} << 60);
    CHECK_THAT(open_error(image), Contains("1152921504606846976 tensors"));
  }
  SECTION("a key length past the end of the file") {
    poke<uint64_t>(image, 24, uint64_t{1} << 62);
    CHECK_THAT(open_error(image), Contains("key of metadata entry 0") && Contains("claims"));
  }
  SECTION("an invalid value type") {
    poke<uint32_t>(image, offset_of(image, "test.u32") + 8, 99);
    CHECK_THAT(open_error(image), Contains("'test.u32'") && Contains("not a GGUF value type"));
  }
  SECTION("an array length past the end of the file") {
    // key, value type, element type, then the element count
    poke<uint64_t>(image, offset_of(image, "test.strings") + 12 + 4 + 4, uint64_t{1} << 61);
    CHECK_THAT(open_error(image), Contains("'test.strings'") && Contains("more than"));
  }
  SECTION("a string length inside an array past the end of the file") {
    poke<uint64_t>(image, offset_of(image, "test.strings") + 12 + 4 + 4 + 8, 1000000);
    CHECK_THAT(open_error(image), Contains("'test.strings'") && Contains("claims 1000000 bytes"));
  }
  SECTION("a bool that is neither 0 nor 1") {
    poke<uint8_t>(image, offset_of(image, "test.flag_a") + 11 + 4, 7);
    CHECK_THAT(open_error(image), Contains("'test.flag_a'") && Contains("bool"));
  }
  SECTION("a duplicate key") {
    image[offset_of(image, "test.flag_b") + 10] = 'a';
    CHECK_THAT(open_error(image), Contains("'test.flag_a' appears twice"));
  }
  SECTION("too many dimensions") {
    poke<uint32_t>(image, tensor_fields(image, "blk.0.attn_q.weight", 2).n_dims, 5);
    CHECK_THAT(open_error(image), Contains("'blk.0.attn_q.weight' has 5 dimensions"));
  }
  SECTION("a zero-sized dimension") {
    poke<uint64_t>(image, tensor_fields(image, "blk.0.attn_q.weight", 2).dims + 8, 0);
    CHECK_THAT(open_error(image), Contains("'blk.0.attn_q.weight' has size 0 in dimension 1"));
  }
  SECTION("an element count that overflows") {
    const size_t dims = tensor_fields(image, "blk.0.attn_q.weight", 2).dims;
    poke<uint64_t>(image, dims, uint64_t{1} << 40);
    poke<uint64_t>(image, dims + 8, uint64_t{1} << 40);
    CHECK_THAT(open_error(image), Contains("'blk.0.attn_q.weight'") && Contains("overflows"));
  }
  SECTION("a shape larger than the data") {
    poke<uint64_t>(image, tensor_fields(image, "blk.0.attn_q.weight", 2).dims, 1 << 20);
    CHECK_THAT(open_error(image), Contains("'blk.0.attn_q.weight' has 2097152 elements"));
  }
  SECTION("a misaligned data offset") {
    poke<uint64_t>(image, tensor_fields(image, "blk.0.attn_k.weight", 1).offset, 40);
    CHECK_THAT(open_error(image),
               Contains("'blk.0.attn_k.weight'") && Contains("not a multiple of the alignment 32"));
  }
  SECTION("a data offset past the end of the file") {
    poke<uint64_t>(image, tensor_fields(image, "blk.0.attn_k.weight", 1).offset, 1 << 20);
    CHECK_THAT(open_error(image), Contains("'blk.0.attn_k.weight'") && Contains("past the end"));
  }
  SECTION("an unsupported tensor type names the type and the tensor") {
    const size_t type = tensor_fields(image, "blk.0.attn_q.weight", 2).type;
    poke<uint32_t>(image, type, 23);
    CHECK_THAT(open_error(image), Contains("'blk.0.attn_q.weight'") && Contains("type iq4_xs"));
    // Q8_K only ever holds activations; a weight of that type is refused.
    poke<uint32_t>(image, type, 15);
    CHECK_THAT(open_error(image), Contains("type q8_K"));
    poke<uint32_t>(image, type, 1000);
    CHECK_THAT(open_error(image), Contains("type unknown (ggml type 1000)"));
  }
  SECTION("a q8_0 tensor whose rows are not whole blocks") {
    poke<uint32_t>(image, tensor_fields(image, "blk.0.attn_k.weight", 1).type,
                   static_cast<uint32_t>(TensorType::Q8_0));
    CHECK_THAT(open_error(image), Contains("'blk.0.attn_k.weight' is q8_0") &&
                                      Contains("not a multiple of the block size 32"));
  }
  SECTION("a duplicate tensor name") {
    image[offset_of(image, "blk.0.attn_k.weight") + 11] = 'q';
    CHECK_THAT(open_error(image), Contains("'blk.0.attn_q.weight' appears twice"));
  }
}

TEST_CASE("alignment and nesting problems are refused", "[gguf]") {
  SECTION("general.alignment that is not a power of two") {
    GgufWriter writer;
    writer.add_uint32("general.alignment", 64);
    std::vector<uint8_t> image = writer.to_bytes();
    poke<uint32_t>(image, offset_of(image, "general.alignment") + 17 + 4, 48);
    CHECK_THAT(open_error(image),
               Contains("general.alignment is 48") && Contains("not a power of two"));
  }
  SECTION("general.alignment of the wrong type") {
    RawGguf raw;
    raw.header(0, 1).key("general.alignment", GgufValueType::UINT64).put<uint64_t>(32).pad();
    CHECK_THAT(open_error(raw.bytes), Contains("general.alignment has type uint64"));
  }
  SECTION("a nested array") {
    RawGguf raw;
    raw.header(0, 1).array("outer", GgufValueType::ARRAY, 1).pad();
    CHECK_THAT(open_error(raw.bytes), Contains("'outer'") && Contains("nested arrays"));
  }
  SECTION("a file without tensors may end before the padding (llama.cpp's vocab files do)") {
    RawGguf raw;
    raw.header(0, 1).key("k", GgufValueType::UINT8).put<uint8_t>(1);
    CHECK(GgufFile::from_memory(raw.bytes.data(), raw.bytes.size()).get_uint("k") == 1u);
    raw.pad();
    CHECK(GgufFile::from_memory(raw.bytes.data(), raw.bytes.size()).get_uint("k") == 1u);
  }
}

TEST_CASE("opens llama.cpp's vocabulary-only file, which has no padding after its header",
          "[gguf]") {
  const GgufFile file = GgufFile::open(CAFLM_TESTDATA_DIR "/vocab/ggml-vocab-llama-spm.gguf");
  CHECK(file.tensors().empty());
  CHECK(file.get_string("tokenizer.ggml.model") == "llama");
  CHECK(file.get_string_array("tokenizer.ggml.tokens").value().size() == 32000);
}

TEST_CASE("copy_metadata carries a tokenizer from one file to another unchanged",
          "[gguf][writer]") {
  const GgufFile source = GgufFile::open(CAFLM_TESTDATA_DIR "/vocab/ggml-vocab-llama-spm.gguf");
  GgufWriter writer;
  writer.add_string("general.architecture", "llama");
  writer.copy_metadata(source, "tokenizer.");
  const GgufFile copy = GgufFile::from_bytes(writer.to_bytes());
  std::size_t copied = 0;
  for (std::string_view key : source.keys()) {
    if (key.substr(0, 10) != "tokenizer.")
      continue;
    ++copied;
    INFO(key);
    const GgufRawValue a = *source.raw_value(key);
    const auto b = copy.raw_value(key);
    REQUIRE(b);
    CHECK(a.type == b->type);
    CHECK(std::string_view(reinterpret_cast<const char*>(a.bytes), a.size) ==
          std::string_view(reinterpret_cast<const char*>(b->bytes), b->size));
  }
  CHECK(copied > 5);
  CHECK(copy.get_string("general.architecture") == "llama");
  CHECK(copy.get_string_array("tokenizer.ggml.tokens") ==
        source.get_string_array("tokenizer.ggml.tokens"));
  CHECK_FALSE(copy.raw_value("general.name"));
}

TEST_CASE("a mapped file reports when it shrank or was written to, not when it was replaced",
          "[gguf]") {
  GgufWriter writer;
  writer.add_tensor("t", TensorType::F32, {256}, pattern(1024, 3));
  const auto path = std::filesystem::temp_directory_path() /
                    ("caflm_test_changed_" + std::to_string(::getpid()) + ".gguf");
  writer.write(path.string());
  const GgufFile file = GgufFile::open(path.string());
  CHECK_FALSE(file.changed_on_disk());

  // Renaming a new file over the path leaves the mapped one as it was.
  writer.write(path.string());
  CHECK_FALSE(file.changed_on_disk());

  const GgufFile replaced = GgufFile::open(path.string());
  std::filesystem::resize_file(path, 100);
  const auto shrank = replaced.changed_on_disk();
  REQUIRE(shrank);
  CHECK_THAT(*shrank, Contains("shrank"));
  std::filesystem::remove(path);
  CHECK_FALSE(GgufFile::from_bytes(writer.to_bytes()).changed_on_disk());
}

TEST_CASE("open() reports files it cannot read", "[gguf]") {
  CHECK_THROWS_WITH(GgufFile::open("/nonexistent/model.gguf"),
                    Contains("'/nonexistent/model.gguf'") && Contains("cannot open"));
  CHECK_THROWS_WITH(GgufFile::open(std::filesystem::temp_directory_path().string()),
                    Contains("not a regular file"));
}

TEST_CASE("tensor type names, ids and row sizes", "[tensor_type]") {
  CHECK(std::string(caflm::to_string(TensorType::Q8_0)) == "q8_0");
  CHECK(caflm::tensor_type_from_name("bf16") == TensorType::BF16);
  CHECK(caflm::tensor_type_from_name("f16") == TensorType::F16);
  CHECK(caflm::tensor_type_from_name("q4_0") == TensorType::Q4_0);
  CHECK(caflm::tensor_type_from_name("Q4_K") == TensorType::Q4_K);
  CHECK(caflm::tensor_type_from_name("q6_k") == TensorType::Q6_K);
  CHECK_FALSE(caflm::tensor_type_from_name("q8_k"));
  CHECK_FALSE(caflm::tensor_type_from_name("iq4_xs"));
  CHECK(caflm::tensor_type_from_id(30) == TensorType::BF16);
  CHECK(caflm::tensor_type_from_id(0) == TensorType::F32);
  CHECK(caflm::tensor_type_from_id(2) == TensorType::Q4_0);
  CHECK(caflm::tensor_type_from_id(14) == TensorType::Q6_K);
  CHECK_FALSE(caflm::tensor_type_from_id(15));
  CHECK_FALSE(caflm::tensor_type_from_id(16));
  CHECK(std::string(caflm::ggml_type_name(2)) == "q4_0");
  CHECK(std::string(caflm::ggml_type_name(12)) == "q4_K");
  CHECK(std::string(caflm::ggml_type_name(23)) == "iq4_xs");
  CHECK(std::string(caflm::ggml_type_name(30)) == "bf16");
  CHECK(std::string(caflm::ggml_type_name(35)) == "tq2_0");
  CHECK(std::string(caflm::ggml_type_name(5000)) == "unknown");
  CHECK(caflm::tensor_row_bytes(TensorType::F32, 10) == 40);
  CHECK(caflm::tensor_row_bytes(TensorType::BF16, 10) == 20);
  CHECK(caflm::tensor_row_bytes(TensorType::Q8_0, 96) == 3 * 34);
  CHECK_THROWS_AS(caflm::tensor_row_bytes(TensorType::Q8_0, 40), std::invalid_argument);
  CHECK(caflm::tensor_row_bytes(TensorType::Q4_0, 64) == 2 * 18);
  CHECK(caflm::tensor_row_bytes(TensorType::Q5_1, 32) == 24);
  CHECK(caflm::tensor_row_bytes(TensorType::Q2_K, 512) == 2 * 84);
  CHECK(caflm::tensor_row_bytes(TensorType::Q3_K, 256) == 110);
  CHECK(caflm::tensor_row_bytes(TensorType::Q4_K, 256) == 144);
  CHECK(caflm::tensor_row_bytes(TensorType::Q5_K, 256) == 176);
  CHECK(caflm::tensor_row_bytes(TensorType::Q6_K, 768) == 3 * 210);
  CHECK_THROWS_WITH(caflm::tensor_row_bytes(TensorType::Q4_K, 288),
                    Contains("q4_k") && Contains("block size 256"));
}

TEST_CASE("f16 conversion is exact and rounds to nearest even", "[tensor_type]") {
  CHECK(caflm::f16_to_f32(0x3c00) == 1.0f);
  CHECK(caflm::f16_to_f32(0xc000) == -2.0f);
  CHECK(caflm::f16_to_f32(0x7bff) == 65504.0f);
  CHECK(caflm::f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(caflm::f16_to_f32(0x0400) == std::ldexp(1.0f, -14));
  CHECK(std::isinf(caflm::f16_to_f32(0x7c00)));
  CHECK(std::signbit(caflm::f16_to_f32(0x8000)));
  CHECK(caflm::f32_to_f16(1.0f) == 0x3c00);
  CHECK(caflm::f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);     // tie: down to even
  CHECK(caflm::f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02); // tie: up to even
  CHECK(caflm::f32_to_f16(65519.0f) == 0x7bff);
  CHECK(caflm::f32_to_f16(65520.0f) == 0x7c00);
  CHECK(caflm::f32_to_f16(-1e10f) == 0xfc00);
  CHECK(caflm::f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);     // tie: down to zero
  CHECK(caflm::f32_to_f16(std::ldexp(3.0f, -26)) == 0x0001);     // 0.75 units: up
  CHECK(caflm::f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);     // 1.5 units: up to even
  CHECK(caflm::f32_to_f16(std::ldexp(1023.75f, -24)) == 0x0400); // carries into the normals
  CHECK(caflm::f32_to_f16(-0.0f) == 0x8000);
  const uint16_t nan = caflm::f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);

  // Every half converts to a float and back unchanged (NaNs stay NaNs).
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto half = static_cast<uint16_t>(bits);
    const float value = caflm::f16_to_f32(half);
    if (std::isnan(value)) {
      const uint16_t back = caflm::f32_to_f16(value);
      REQUIRE(((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0));
      REQUIRE((back & 0x8000) == (half & 0x8000));
    } else {
      REQUIRE(caflm::f32_to_f16(value) == half);
    }
  }

#ifdef __F16C__
  // The CPU's own conversion is an independent reference for every rounding
  // case; a million float patterns spread over all exponents.
  uint64_t mismatches = 0;
  uint32_t first_mismatch = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4093) {
    const auto pattern32 = static_cast<uint32_t>(bits);
    float value;
    std::memcpy(&value, &pattern32, sizeof value);
    if (std::isnan(value)) {
      continue;
    }
    // _mm_cvtps_ph, not _cvtss_sh: clang's _cvtss_sh macro is a C99
    // compound literal, which -Wpedantic rejects in C++.
    const auto expected = static_cast<uint16_t>(
        _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(value), _MM_FROUND_TO_NEAREST_INT), 0));
    if (caflm::f32_to_f16(value) != expected ||
        caflm::f16_to_f32(expected) != _cvtsh_ss(expected)) {
      first_mismatch = mismatches++ == 0 ? pattern32 : first_mismatch;
    }
  }
  INFO("first mismatching f32 bits " << first_mismatch);
  CHECK(mismatches == 0);
#endif
}

TEST_CASE("bf16 conversion is exact and rounds to nearest even", "[tensor_type]") {
  const auto from_bits = [](uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  };
  CHECK(caflm::bf16_to_f32(0x3f80) == 1.0f);
  CHECK(caflm::bf16_to_f32(0xc040) == -3.0f);
  CHECK(caflm::f32_to_bf16(1.0f) == 0x3f80);
  CHECK(caflm::f32_to_bf16(from_bits(0x3f808000)) == 0x3f80); // tie: down to even
  CHECK(caflm::f32_to_bf16(from_bits(0x3f818000)) == 0x3f82); // tie: up to even
  CHECK(caflm::f32_to_bf16(from_bits(0x3f808001)) == 0x3f81);
  CHECK(caflm::f32_to_bf16(from_bits(0x3f807fff)) == 0x3f80);
  CHECK(caflm::f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80); // rounds to infinity
  const uint16_t nan = caflm::f32_to_bf16(from_bits(0x7f800001)); // payload only in the low bits
  CHECK(std::isnan(caflm::bf16_to_f32(nan)));
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto bf16 = static_cast<uint16_t>(bits);
    const float value = caflm::bf16_to_f32(bf16);
    if (std::isnan(value)) {
      REQUIRE(std::isnan(caflm::bf16_to_f32(caflm::f32_to_bf16(value))));
    } else {
      REQUIRE(caflm::f32_to_bf16(value) == bf16);
    }
  }
}
