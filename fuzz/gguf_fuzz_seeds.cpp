// Writes the seed corpus for gguf_fuzz: small valid files made with
// GgufWriter (every value type, every tensor type, a non-default alignment),
// plus, when given a model, that model's header without its tensor data.
//
//   gguf_fuzz_seeds OUT_DIR [MODEL.gguf]

#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/gguf_writer.hpp"
#include "caflm/gguf/quant_blocks.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

void save(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    throw caflm::GgufError("cannot write " + path);
  }
}

std::vector<uint8_t> every_value_type() {
  caflm::GgufWriter writer;
  writer.add_string("general.architecture", "llama");
  writer.add_uint32("llama.block_count", 2);
  writer.add_int32("test.i32", -5);
  writer.add_uint64("test.u64", 1ull << 40);
  writer.add_float32("llama.rope.freq_base", 10000.0f);
  writer.add_bool("tokenizer.ggml.add_bos_token", true);
  writer.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
  writer.add_float_array("tokenizer.ggml.scores", {0.0f, -1.0f, -2.0f, -3.0f});
  writer.add_int32_array("tokenizer.ggml.token_type", {2, 3, 3, 1});
  return writer.to_bytes();
}

std::vector<uint8_t> every_tensor_type(uint32_t alignment) {
  caflm::GgufWriter writer;
  writer.add_uint32("general.alignment", alignment);
  writer.add_tensor("a.f32", caflm::TensorType::F32, {3, 2}, std::vector<uint8_t>(24, 1));
  writer.add_tensor("b.f16", caflm::TensorType::F16, {5}, std::vector<uint8_t>(10, 2));
  writer.add_tensor("c.bf16", caflm::TensorType::BF16, {2, 2, 1, 2}, std::vector<uint8_t>(16, 3));
  writer.add_tensor("d.q8_0", caflm::TensorType::Q8_0, {32, 2},
                    std::vector<uint8_t>(2 * sizeof(caflm::BlockQ8_0), 4));
  return writer.to_bytes();
}

/// The model's bytes up to the end of its header (where the first tensor's data starts).
std::vector<uint8_t> model_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> image{std::istreambuf_iterator<char>(in),
                                   std::istreambuf_iterator<char>()};
  const caflm::GgufFile file = caflm::GgufFile::from_memory(image.data(), image.size());
  const uint8_t* data_start = image.data() + image.size();
  for (const caflm::GgufTensorInfo& tensor : file.tensors()) {
    data_start = std::min(data_start, tensor.data);
  }
  return {image.data(), data_start};
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR [MODEL.gguf]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    save(dir + "/values.gguf", every_value_type());
    save(dir + "/tensors.gguf", every_tensor_type(32));
    save(dir + "/tensors_align8.gguf", every_tensor_type(8));
    save(dir + "/empty.gguf", caflm::GgufWriter().to_bytes());
    if (argc == 3) {
      save(dir + "/model_header.gguf", model_header(argv[2]));
    }
  } catch (const caflm::GgufError& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  return 0;
}
