// The `caflm` command as a user runs it: tokenize against llama.cpp's
// vectors, greedy generation against the reference outputs, random test
// models, bench output, and clear errors (never a crash) for bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "caflm/gguf/gguf.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/vocabulary.hpp"
#include "tests/support/cli_harness.hpp"

namespace fs = std::filesystem;
using namespace caflm::testing;

namespace {

const std::string kTestData = CAFLM_TESTDATA_DIR;
const std::string kSpmVocab = kTestData + "/vocab/ggml-vocab-llama-spm.gguf";
const std::string kTinyModel = kTestData + "/models/tiny-llama-f32.gguf";

nlohmann::json parse_json(const Run& run) {
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  REQUIRE_FALSE(run.crashed);
  REQUIRE_FALSE(run.out.empty());
  REQUIRE(run.out.back() == '\n');
  return nlohmann::json::parse(run.out);
}

std::vector<std::string> split(const std::string& text, const std::string& separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t at; (at = text.find(separator, start)) != std::string::npos;
       start = at + separator.size())
    parts.push_back(text.substr(start, at - start));
  parts.push_back(text.substr(start));
  return parts;
}

} // namespace

TEST_CASE("tokenize prints llama.cpp's ids for its SPM test strings") {
  // .inp: texts, each followed by a separator line; .out: one line of ids per
  // text, without BOS.
  std::vector<std::string> texts = split(read_file(kSpmVocab + ".inp"), "\n__ggml_vocab_test__\n");
  REQUIRE(texts.back().empty());
  texts.pop_back();
  std::vector<std::string> lines = split(read_file(kSpmVocab + ".out"), "\n");
  REQUIRE(lines.back().empty());
  lines.pop_back();
  REQUIRE(texts.size() == lines.size());
  REQUIRE(texts.size() > 40);

  // Texts with leading spaces, dashes, an empty one, newlines, tabs and
  // multi-byte characters are all among them.
  for (std::size_t i = 0; i < texts.size(); ++i) {
    INFO("case " << i << ": '" << texts[i] << "'");
    std::vector<std::uint32_t> ids;
    std::istringstream line(lines[i]);
    for (std::uint32_t id; line >> id;)
      ids.push_back(id);
    auto with_bos =
        parse_json(run_caflm({"tokenize", "--model", kSpmVocab, "--json", "--", texts[i]}));
    std::vector<std::uint32_t> expected{1}; // BOS
    expected.insert(expected.end(), ids.begin(), ids.end());
    CHECK(with_bos == nlohmann::json{{"tokens", expected}});
    if (i % 8 == 0) {
      auto without_bos = parse_json(
          run_caflm({"tokenize", "--model", kSpmVocab, "--json", "--no-bos", "--", texts[i]}));
      CHECK(without_bos == nlohmann::json{{"tokens", ids}});
    }
  }
}

TEST_CASE("tokenize takes empty texts, leading spaces and dashes after --") {
  auto tokens = [](const std::vector<std::string>& args) {
    std::vector<std::string> all{"tokenize", "--model", kSpmVocab, "--json"};
    all.insert(all.end(), args.begin(), args.end());
    return parse_json(run_caflm(all))["tokens"].get<std::vector<caflm::TokenId>>();
  };
  // The library's tokenizer (checked against llama.cpp's vectors in
  // test_tokenizer) says what the command must print.
  const caflm::Tokenizer tokenizer(std::make_shared<const caflm::Vocabulary>(
      caflm::Vocabulary::from_gguf(caflm::GgufFile::open(kSpmVocab))));
  CHECK(tokens({"--", ""}) == std::vector<caflm::TokenId>{1});
  CHECK(tokens({"--no-bos", "--", ""}).empty());
  for (const std::string text :
       {"   leading spaces", "--weird", "-", "-- x", "--no-bos", "--json"}) {
    INFO("'" << text << "'");
    CHECK(tokens({"--", text}) == tokenizer.encode(text, true));
    CHECK(tokens({"--no-bos", "--", text}) == tokenizer.encode(text, false));
    CHECK(tokenizer.encode(text, false).size() > 0);
  }
  // Without --, a text that looks like an option is refused, not tokenized.
  Run refused = run_caflm({"tokenize", "--model", kSpmVocab, "--json", "--weird"});
  CHECK_FALSE(refused.crashed);
  CHECK(refused.exit_code > 0);
  // Plain output: ids separated by spaces.
  Run plain = run_caflm({"tokenize", "--model", kSpmVocab, "--", "Hello world"});
  CHECK(plain.exit_code == 0);
  CHECK(plain.out == "1 15043 3186\n");
}

TEST_CASE("generate --json on the tiny model gives llama.cpp's greedy tokens") {
  std::ifstream in(kTestData + "/models/tiny-llama-f32.expected.json");
  REQUIRE(in.good());
  const auto cases = nlohmann::json::parse(in)["cases"];
  // A prompt with a leading space, double spaces and a tab; one with
  // multi-byte characters and an emoji.
  for (std::size_t i : {2, 3}) {
    const auto& c = cases[i];
    const std::string prompt = c["prompt"];
    INFO("case " << i << ": " << prompt);
    const auto out = parse_json(
        run_caflm({"generate", "--model", kTinyModel, "--prompt", prompt, "--max-tokens", "24",
                   "--temperature", "0", "--ignore-eos", "--top-logprobs", "5", "--json"}));
    REQUIRE(out.is_object());
    CHECK(out["prompt_tokens"] == c["prompt_tokens"]);
    CHECK(out["tokens"] == c["greedy_tokens"]);
    CHECK(out["text"] == c["greedy_text"]);
    CHECK(out["finish_reason"] == "length");
    // top_logprobs: one list per generated token of [id, logprob] pairs,
    // most likely first.
    const auto& top = out["top_logprobs"];
    REQUIRE(top.is_array());
    REQUIRE(top.size() == 24);
    for (std::size_t step = 0; step < top.size(); ++step) {
      INFO("step " << step);
      REQUIRE(top[step].is_array());
      REQUIRE(top[step].size() == 5);
      for (std::size_t k = 0; k < 5; ++k) {
        const auto& pair = top[step][k];
        REQUIRE(pair.is_array());
        REQUIRE(pair.size() == 2);
        REQUIRE(pair[0].is_number_unsigned());
        REQUIRE(pair[1].is_number());
        CHECK(pair[0] == c["top5_logprobs"][step][k][0]);
        CHECK(std::abs(pair[1].get<double>() - c["top5_logprobs"][step][k][1].get<double>()) <
              1e-3);
        if (k > 0)
          CHECK(top[step][k - 1][1].get<double>() >= pair[1].get<double>());
      }
      CHECK(top[step][0][0] == out["tokens"][step]);
    }
  }
}

TEST_CASE("generate reads special tokens' texts in a prompt as those tokens") {
  // As llama.cpp's CLI and server do: "</s>" in the prompt is EOS (id 2),
  // not the five pieces of its text, and BOS comes first as the vocabulary
  // says.
  const auto out =
      parse_json(run_caflm({"generate", "--model", kTinyModel, "--prompt", "Hello</s>world",
                            "--max-tokens", "1", "--temperature", "0", "--json"}));
  const caflm::Tokenizer tokenizer(std::make_shared<const caflm::Vocabulary>(
      caflm::Vocabulary::from_gguf(caflm::GgufFile::open(kTinyModel))));
  std::vector<caflm::TokenId> expected{1};
  for (caflm::TokenId id : tokenizer.encode("Hello", false))
    expected.push_back(id);
  expected.push_back(2);
  // SPM puts a space before each piece of text, the one after "</s>" too.
  for (caflm::TokenId id : tokenizer.encode("world", false))
    expected.push_back(id);
  CHECK(out["prompt_tokens"] == expected);
}

TEST_CASE("make-test-model writes the same file for the same seed, and generate runs it") {
  TempDir dir;
  auto make = [&](const fs::path& out, const std::string& seed) {
    return make_small_model(out.string(), {"qwen2", "q8_0", "128", seed, {"--tied"}});
  };
  const fs::path first = dir / "a.gguf", again = dir / "b.gguf", other = dir / "c.gguf";
  const std::vector<std::pair<fs::path, std::string>> models{
      {first, "3"}, {again, "3"}, {other, "4"}};
  for (const auto& [path, seed] : models) {
    Run run = make(path, seed);
    INFO(describe(run));
    REQUIRE(run.exit_code == 0);
    REQUIRE(fs::file_size(path) > 1000);
  }
  CHECK(read_file(first) == read_file(again));
  CHECK(read_file(first) != read_file(other));

  const std::vector<std::string> generate{
      "generate",      "--model", first.string(), "--prompt", "hello there", "--max-tokens", "8",
      "--temperature", "0",       "--ignore-eos", "--json"};
  const auto out = parse_json(run_caflm(generate));
  CHECK(out["tokens"].size() == 8);
  CHECK(out["finish_reason"] == "length");
  CHECK(out["text"].is_string());
  CHECK(out["prompt_tokens"].size() > 1);
  // The documented shape holds without --top-logprobs too: one empty list
  // per generated token.
  REQUIRE(out["top_logprobs"].size() == 8);
  for (const auto& step : out["top_logprobs"])
    CHECK(step.empty());
  // Greedy generation is deterministic.
  CHECK(parse_json(run_caflm(generate)) == out);

  // Streaming text (no --json): the text, then a newline.
  auto streamed = generate;
  streamed.pop_back();
  Run plain = run_caflm(streamed);
  CHECK(plain.exit_code == 0);
  CHECK(plain.out == out["text"].get<std::string>() + "\n");
}

TEST_CASE("make-test-model refuses impossible models with a clear message") {
  TempDir dir;
  const fs::path out = dir / "bad.gguf";
  auto make = [&](const std::string& type, const std::string& heads, const std::string& kv_heads,
                  const std::string& context) {
    std::vector<std::string> args{
        "make-test-model", "--out", out.string(), "--arch", "llama",  "--dim", "64",
        "--layers",        "1",     "--ffn",      "128",    "--seed", "1"};
    args.insert(args.end(), {"--type", type, "--heads", heads, "--kv-heads", kv_heads});
    args.insert(args.end(), {"--context", context});
    return run_caflm(args);
  };
  check_clean_failure(make("iq2_xs", "4", "2", "64"), "iq2_xs");
  CHECK_FALSE(fs::exists(out));
  check_clean_failure(make("f32", "3", "1", "64"), "heads");
  CHECK_FALSE(fs::exists(out));
  check_clean_failure(make("f32", "4", "3", "64"), "kv-heads");
  CHECK_FALSE(fs::exists(out));
  // A model with no context could not be loaded.
  check_clean_failure(make("f32", "4", "2", "0"), "--context");
  CHECK_FALSE(fs::exists(out));
  // Each of those with that one thing put right works.
  const Run valid = make("f32", "4", "2", "64");
  CHECK(valid.exit_code == 0);
  CHECK(fs::exists(out));
  fs::remove(out);
  // A missing required option.
  Run missing = run_caflm({"make-test-model", "--out", out.string(), "--arch", "llama"});
  CHECK_FALSE(missing.crashed);
  CHECK(missing.exit_code > 0);
  CHECK(missing.err.find("required") != std::string::npos);
}

TEST_CASE("generate and tokenize report missing and truncated model files") {
  check_clean_failure(
      run_caflm({"generate", "--model", "/nonexistent/model.gguf", "--prompt", "hi"}),
      "/nonexistent/model.gguf");
  check_clean_failure(run_caflm({"tokenize", "--model", "/nonexistent/model.gguf", "--", "hi"}),
                      "/nonexistent/model.gguf");

  TempDir dir;
  const std::string model = read_file(kTinyModel);
  for (std::size_t length :
       {std::size_t{0}, std::size_t{1000}, model.size() / 2, model.size() - 1}) {
    INFO("first " << length << " bytes");
    const fs::path truncated = dir / ("truncated-" + std::to_string(length) + ".gguf");
    std::ofstream(truncated, std::ios::binary).write(model.data(), std::streamsize(length));
    check_clean_failure(run_caflm({"generate", "--model", truncated.string(), "--prompt", "hi"}),
                        truncated.string());
  }
  const fs::path truncated = dir / "truncated-1000.gguf";
  check_clean_failure(run_caflm({"tokenize", "--model", truncated.string(), "--", "hi"}),
                      truncated.string());
}

TEST_CASE("generate refuses bad sampling options") {
  check_clean_failure(
      run_caflm({"generate", "--model", kTinyModel, "--prompt", "hi", "--temperature", "-1"}),
      "temperature");
  check_clean_failure(
      run_caflm({"generate", "--model", kTinyModel, "--prompt", "hi", "--top-logprobs", "50"}),
      "top_logprobs");
  check_clean_failure(
      run_caflm({"generate", "--model", kTinyModel, "--prompt", "hi", "--max-tokens", "0"}),
      "--max-tokens");
}

TEST_CASE("bench --json reports the machine and a result per batch size") {
  TempDir dir;
  const fs::path model = dir / "bench.gguf";
  REQUIRE(make_small_model(model.string(), {"llama", "f32", "128", "3", {}}).exit_code == 0);
  const auto out = parse_json(
      run_caflm({"bench", "--model", model.string(), "--device", "cpu", "--prompt-tokens", "8",
                 "--gen-tokens", "4", "--concurrency", "1,2", "--json"}));
  INFO(out.dump());
  REQUIRE(out.is_object());
  CHECK(out["device"] == "cpu");
  CHECK(out["file_bytes"] == fs::file_size(model));
  CHECK(out["read_bandwidth_gb_s"].get<double>() > 0.0);
  const std::string kernels = out["cpu_kernels"].get<std::string>();
  CHECK((kernels == "avx2" || kernels == "avx512" || kernels == "amx"));
  CHECK(out["weight_bytes_per_decode_step"].get<double>() > 0.0);
  CHECK(out["weight_bytes_per_decode_step"].get<double>() < double(fs::file_size(model)));
  // A build that found jemalloc links it into caflm, and it, not glibc's
  // malloc, serves the program's allocations (apps/allocator/).
  const std::string allocator = out["allocator"].get<std::string>();
  if (CAFLM_HAVE_JEMALLOC)
    CHECK(allocator.rfind("jemalloc ", 0) == 0);
  else
    CHECK(allocator == "system malloc");
  const auto& results = out["results"];
  REQUIRE(results.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(results[i]["device"] == "cpu");
    CHECK(results[i]["concurrency"] == i + 1);
    for (const char* key : {"prefill_tok_s", "decode_tok_s", "prefill_gflop_s", "decode_read_gb_s",
                            "decode_bandwidth_fraction"}) {
      REQUIRE(results[i].contains(key));
      REQUIRE(results[i][key].is_number());
      CHECK(results[i][key].get<double>() > 0.0);
    }
    CHECK(results[i]["kv_cache_bytes"].get<double>() > 0.0);
    CHECK(results[i]["resident_bytes"].get<double>() > 0.0);
  }
  // The mixed workload's KV waste: some slots of the last blocks are empty,
  // never more than are allocated.
  const auto& waste = out["kv_waste"];
  CHECK(waste["sequences"] == 2);
  CHECK(waste["used_slot_steps"].get<double>() > 0.0);
  CHECK(waste["used_slot_steps"].get<double>() <= waste["allocated_slot_steps"].get<double>());
  CHECK(waste["waste_fraction"].get<double>() >= 0.0);
  CHECK(waste["waste_fraction"].get<double>() < 1.0);
  check_clean_failure(run_caflm({"bench", "--model", model.string(), "--gen-tokens", "0"}),
                      "--gen-tokens");
  check_clean_failure(run_caflm({"bench", "--model", model.string(), "--concurrency", "2,0"}),
                      "concurrency");
  CHECK(out["kv_cache_type"] == "f32");

  SECTION("an F16 KV cache takes half the bytes for the same sequences") {
    const auto f16 = parse_json(run_caflm(
        {"bench", "--model", model.string(), "--device", "cpu", "--prompt-tokens", "8",
         "--gen-tokens", "4", "--concurrency", "1,2", "--kv-cache-type", "f16", "--json"}));
    INFO(f16.dump());
    CHECK(f16["kv_cache_type"] == "f16");
    REQUIRE(f16["results"].size() == 2);
    for (std::size_t i = 0; i < 2; ++i)
      CHECK(2 * f16["results"][i]["kv_cache_bytes"].get<std::uint64_t>() ==
            results[i]["kv_cache_bytes"].get<std::uint64_t>());
    check_clean_failure(run_caflm({"bench", "--model", model.string(), "--kv-cache-type", "q8_0"}),
                        "--kv-cache-type");
  }
}

TEST_CASE("--device auto falls back to the CPU saying so once; --device cuda never does") {
  TempDir dir;
  const fs::path model = dir / "device.gguf";
  REQUIRE(make_small_model(model.string(), {"llama", "f32", "128", "3", {}}).exit_code == 0);
  const Run automatic =
      run_caflm({"generate", "--model", model.string(), "--replicas", "2", "--device", "auto",
                 "--prompt", "Hello", "--max-tokens", "2", "--temperature", "0"});
  INFO(describe(automatic));
  REQUIRE(automatic.exit_code == 0);
  const std::string fallback = "running on the CPU";
  std::size_t said = 0;
  for (std::size_t at = automatic.err.find(fallback); at != std::string::npos;
       at = automatic.err.find(fallback, at + 1))
    ++said;
  const Run cuda = run_caflm({"generate", "--model", model.string(), "--device", "cuda", "--prompt",
                              "Hello", "--max-tokens", "2", "--temperature", "0"});
  if (said > 0) {
    // No usable GPU here: once for two replicas, with the reason; and a
    // demand for CUDA is an error that gives the same reason.
    CHECK(said == 1);
    CHECK(automatic.err.find("no usable CUDA device (") != std::string::npos);
    check_clean_failure(cuda, "--device cuda: ");
  } else {
    INFO(describe(cuda));
    CHECK(cuda.exit_code == 0);
  }
  check_clean_failure(
      run_caflm({"generate", "--model", model.string(), "--device", "gpu", "--prompt", "Hello"}),
      "expected cuda, cpu or auto");
  check_clean_failure(run_caflm({"bench", "--model", model.string(), "--gpu-memory", "1.5"}),
                      "--gpu-memory");
}
