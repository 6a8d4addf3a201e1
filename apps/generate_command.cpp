#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "apps/commands.hpp"
#include "model/inference_engine.hpp"
#include "model/model.hpp"
#include "model/vocabulary.hpp"

namespace caflm::apps {

namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  SamplingParams params;
  bool json = false;
};

void run_generate(GenerateOptions& options) {
  if (auto problem = validate(options.params))
    throw std::invalid_argument(*problem);
  auto model = Model::load(options.model);
  const Tokenizer& tokenizer = model->tokenizer();
  GenerationRequest request;
  request.id = 1;
  request.prompt = tokenizer.encode(options.prompt, tokenizer.vocabulary().add_bos());
  request.params = options.params;
  auto engine = make_cpu_engine(model, cpu_engine_config(*model));
  if (auto refused = engine->add(request))
    throw std::runtime_error(to_string(*refused));

  nlohmann::json tokens = nlohmann::json::array();
  nlohmann::json top_logprobs = nlohmann::json::array();
  std::string text;
  FinishReason finish = FinishReason::None;
  while (engine->has_work()) {
    for (const TokenEvent& event : engine->step()) {
      if (event.finish != FinishReason::Error) {
        tokens.push_back(event.token);
        nlohmann::json step = nlohmann::json::array();
        for (const TokenLogprob& top : event.top_logprobs)
          step.push_back({top.token, top.logprob});
        top_logprobs.push_back(std::move(step));
      }
      text += event.text;
      if (!options.json) {
        std::fputs(event.text.c_str(), stdout);
        std::fflush(stdout);
      }
      finish = event.finish;
    }
  }
  if (finish == FinishReason::Error)
    throw std::runtime_error("generation failed: the request does not fit in the KV cache");
  if (!options.json) {
    std::printf("\n");
    return;
  }
  nlohmann::ordered_json out{{"prompt_tokens", request.prompt},
                             {"tokens", tokens},
                             {"text", text},
                             {"finish_reason", to_string(finish)}};
  if (options.params.top_logprobs > 0)
    out["top_logprobs"] = top_logprobs;
  std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

} // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  SamplingParams& p = options->params;
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  cmd->add_option("--model", options->model, "GGUF model file")->required();
  cmd->add_option("--prompt", options->prompt, "Prompt text")->required();
  cmd->add_option("--max-tokens", p.max_tokens, "Tokens to generate at most")
      ->capture_default_str();
  cmd->add_option("--temperature", p.temperature, "0 for greedy")->capture_default_str();
  cmd->add_option("--top-k", p.top_k, "Keep the k most likely tokens (0: all)");
  cmd->add_option("--top-p", p.top_p, "Nucleus sampling threshold");
  cmd->add_option("--min-p", p.min_p, "Drop tokens below min-p times the best probability");
  cmd->add_option("--repeat-penalty", p.repetition_penalty, "Repetition penalty (1: off)");
  cmd->add_option("--presence-penalty", p.presence_penalty, "Presence penalty");
  cmd->add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty");
  cmd->add_option("--seed", p.seed, "Sampling seed");
  cmd->add_option("--stop", p.stop, "Stop string (repeatable); it is not printed");
  cmd->add_flag("--ignore-eos", p.ignore_eos, "Never stop at end-of-sequence");
  cmd->add_option("--top-logprobs", p.top_logprobs, "Report the k most likely tokens per step");
  cmd->add_flag("--json", options->json, "Print one JSON object instead of streaming text");
  cmd->callback([options] { run_generate(*options); });
}

} // namespace caflm::apps
