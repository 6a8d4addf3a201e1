// llama.cpp's Q4_K_M mixture and its fallback for rows that are not whole
// K-quant blocks, as make-test-model writes them.
#include <catch2/catch.hpp>

#include "caflm/model/quant_mix.hpp"

using namespace caflm;

namespace {

TensorType q4_k_m(WeightRole role, std::uint32_t layer, std::uint32_t n_layers, std::uint64_t cols,
                  bool tied = false) {
  return quant_mix_type(QuantMix::Q4_K_M, TensorType::Q4_K,
                        WeightPlace{role, layer, n_layers, cols, tied});
}

} // namespace

TEST_CASE("use_more_bits picks the first and last eighth and every third layer between") {
  std::vector<std::uint32_t> chosen;
  for (std::uint32_t i = 0; i < 24; ++i)
    if (use_more_bits(i, 24))
      chosen.push_back(i);
  // n/8 = 3, 7n/8 = 21, and (i - 3) % 3 == 2 between.
  CHECK(chosen == std::vector<std::uint32_t>{0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23});
  // Two layers: n/8 = 0, so only the last (i >= 7*2/8 = 1).
  CHECK_FALSE(use_more_bits(0, 2));
  CHECK(use_more_bits(1, 2));
  // 30 layers (SmolLM-135M): n/8 = 3, 7n/8 = 26.
  CHECK(use_more_bits(2, 30));
  CHECK_FALSE(use_more_bits(3, 30));
  CHECK(use_more_bits(5, 30));
  CHECK_FALSE(use_more_bits(25, 30));
  CHECK(use_more_bits(26, 30));
}

TEST_CASE("Q4_K_M on a model whose rows are whole K-quant blocks (Llama-2-7B)") {
  const std::uint32_t n = 32;
  CHECK(q4_k_m(WeightRole::Output, 0, n, 4096) == TensorType::Q6_K);
  CHECK(q4_k_m(WeightRole::TokenEmbedding, 0, n, 4096) == TensorType::Q4_K);
  CHECK(q4_k_m(WeightRole::TokenEmbedding, 0, n, 4096, /*tied=*/true) == TensorType::Q6_K);
  CHECK(q4_k_m(WeightRole::AttnV, 0, n, 4096) == TensorType::Q6_K);
  CHECK(q4_k_m(WeightRole::AttnV, 4, n, 4096) == TensorType::Q4_K);
  CHECK(q4_k_m(WeightRole::AttnV, 6, n, 4096) == TensorType::Q6_K); // (6 - 4) % 3 == 2
  CHECK(q4_k_m(WeightRole::FfnDown, 31, n, 11008) == TensorType::Q6_K);
  CHECK(q4_k_m(WeightRole::FfnDown, 9, n, 11008) == TensorType::Q6_K); // (9 - 4) % 3 == 2
  CHECK(q4_k_m(WeightRole::FfnDown, 10, n, 11008) == TensorType::Q4_K);
  for (WeightRole role : {WeightRole::AttnQ, WeightRole::AttnK, WeightRole::AttnOutput,
                          WeightRole::FfnGate, WeightRole::FfnUp})
    CHECK(q4_k_m(role, 0, n, 4096) == TensorType::Q4_K);
  // phi3's fused QKV counts as attn_v in current llama.cpp.
  CHECK(q4_k_m(WeightRole::AttnQkv, 0, n, 3072) == TensorType::Q6_K);
  CHECK(q4_k_m(WeightRole::AttnQkv, 4, n, 3072) == TensorType::Q4_K);
}

TEST_CASE("Q4_K_M falls back per tensor where rows are not whole 256-value blocks") {
  // SmolLM-135M: dim 576 = 2.25 blocks, FFN 1536 = 6 blocks, 30 layers.
  const std::uint32_t n = 30;
  CHECK(q4_k_m(WeightRole::TokenEmbedding, 0, n, 576, true) == TensorType::Q8_0);
  CHECK(q4_k_m(WeightRole::Output, 0, n, 576) == TensorType::Q8_0);
  CHECK(q4_k_m(WeightRole::AttnQ, 0, n, 576) == TensorType::Q5_0);    // Q4_K -> Q5_0
  CHECK(q4_k_m(WeightRole::AttnV, 0, n, 576) == TensorType::Q8_0);    // Q6_K -> Q8_0
  CHECK(q4_k_m(WeightRole::AttnV, 3, n, 576) == TensorType::Q5_0);    // Q4_K -> Q5_0
  CHECK(q4_k_m(WeightRole::FfnDown, 0, n, 1536) == TensorType::Q6_K); // rows of 1536 fit
  CHECK(q4_k_m(WeightRole::FfnDown, 3, n, 1536) == TensorType::Q4_K);
  // Qwen2.5-0.5B: dim 896, FFN 4864 = 19 blocks.
  CHECK(q4_k_m(WeightRole::FfnUp, 0, 24, 896) == TensorType::Q5_0);
  CHECK(q4_k_m(WeightRole::FfnDown, 0, 24, 4864) == TensorType::Q6_K);
}

TEST_CASE("fallback types follow llama.cpp's tensor_type_fallback") {
  CHECK(fallback_type(TensorType::Q2_K, 96) == TensorType::Q4_0);
  CHECK(fallback_type(TensorType::Q3_K, 96) == TensorType::Q4_0);
  CHECK(fallback_type(TensorType::Q4_K, 96) == TensorType::Q5_0);
  CHECK(fallback_type(TensorType::Q5_K, 96) == TensorType::Q5_1);
  CHECK(fallback_type(TensorType::Q6_K, 96) == TensorType::Q8_0);
  CHECK(fallback_type(TensorType::Q6_K, 512) == TensorType::Q6_K);
  CHECK(fallback_type(TensorType::Q4_K, 40) == TensorType::F16); // not even 32-value blocks
  CHECK(fallback_type(TensorType::Q8_0, 64) == TensorType::Q8_0);
  CHECK_THROWS_WITH(fallback_type(TensorType::Q8_0, 40),
                    Catch::Matchers::Contains("q8_0") && Catch::Matchers::Contains("40"));
}

TEST_CASE("a uniform mix keeps one type, with the same fallback") {
  const WeightPlace place{WeightRole::AttnV, 0, 2, 64, false};
  CHECK(quant_mix_type(QuantMix::Uniform, TensorType::F16, place) == TensorType::F16);
  CHECK(quant_mix_type(QuantMix::Uniform, TensorType::Q8_0, place) == TensorType::Q8_0);
  CHECK(quant_mix_type(QuantMix::Uniform, TensorType::Q6_K, place) == TensorType::Q8_0);
  CHECK(quant_mix_type(QuantMix::Uniform, TensorType::Q4_K,
                       WeightPlace{WeightRole::AttnV, 0, 2, 256, false}) == TensorType::Q4_K);
  CHECK(quant_mix_from_name("Q4_K_M") == QuantMix::Q4_K_M);
  CHECK(quant_mix_from_name("uniform") == QuantMix::Uniform);
  CHECK_FALSE(quant_mix_from_name("q4_k_s"));
}
