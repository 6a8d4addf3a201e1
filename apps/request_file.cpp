#include "apps/request_file.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "caflm/engine/request_limits.hpp"

namespace caflm::apps {

const char* const kRequestFileHelp =
    "JSONL file ('-' for standard input), one request object per line, read as it goes. "
    "Fields: \"prompt\" (string) or \"prompt_tokens\" (array of token ids); \"id\" (string or "
    "number, echoed in the output; default: the line number); \"max_tokens\" (integer >= 1); "
    "\"temperature\" (0 to 100; 0 is greedy); \"top_p\" (in (0, 1]); \"top_k\" (integer, 0 "
    "or -1: off); \"min_p\" (0 to 1); \"repetition_penalty\" (> 0); \"presence_penalty\" and "
    "\"frequency_penalty\" (-2 to 2); \"seed\" (integer >= 0); \"stop\" (string or array of "
    "strings); \"ignore_eos\" (boolean); \"top_logprobs\" (0 to 20); \"priority\" (integer, "
    "higher first). Unknown fields are an error. Fields left out take the command line's "
    "values.";

namespace {

const std::vector<std::string_view> kFields{
    "id",    "prompt",     "prompt_tokens",      "max_tokens",       "temperature",       "top_p",
    "top_k", "min_p",      "repetition_penalty", "presence_penalty", "frequency_penalty", "seed",
    "stop",  "ignore_eos", "top_logprobs",       "priority"};

/// Edit distance, to suggest the field a misspelt one meant.
std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/// Reads the fields of one line, each checked for type and range.
class LineReader {
 public:
  LineReader(const nlohmann::json& object, std::size_t line_number)
    : object_(object)
    , line_(line_number) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("line " + std::to_string(line_) + ": " + what);
  }

  const nlohmann::json* find(const char* field) const {
    auto it = object_.find(field);
    return it == object_.end() ? nullptr : &*it;
  }

  /// An integer in [low, high].
  template <class T>
  void integer(const char* field, T& out, std::int64_t low, std::uint64_t high) const {
    const nlohmann::json* value = find(field);
    if (value == nullptr)
      return;
    if (value->is_number_unsigned()) {
      const auto x = value->get<std::uint64_t>();
      if (x > high)
        fail(std::string("\"") + field + "\" must be at most " + std::to_string(high) + ", not " +
             value->dump());
      out = static_cast<T>(x);
    } else if (value->is_number_integer()) {
      const auto x = value->get<std::int64_t>();
      if (x < low || (x >= 0 && static_cast<std::uint64_t>(x) > high))
        fail(std::string("\"") + field + "\" must be in [" + std::to_string(low) + ", " +
             std::to_string(high) + "], not " + value->dump());
      out = static_cast<T>(x);
    } else {
      fail(std::string("\"") + field + "\" must be an integer, not " + value->dump());
    }
  }

  /// A finite number (ranges are SamplingParams' to check).
  void number(const char* field, float& out) const {
    const nlohmann::json* value = find(field);
    if (value == nullptr)
      return;
    if (!value->is_number())
      fail(std::string("\"") + field + "\" must be a number, not " + value->dump());
    const double x = value->get<double>();
    if (!std::isfinite(static_cast<float>(x)))
      fail(std::string("\"") + field + "\" is out of range: " + value->dump());
    out = static_cast<float>(x);
  }

  void boolean(const char* field, bool& out) const {
    const nlohmann::json* value = find(field);
    if (value == nullptr)
      return;
    if (!value->is_boolean())
      fail(std::string("\"") + field + "\" must be true or false, not " + value->dump());
    out = value->get<bool>();
  }

 private:
  const nlohmann::json& object_;
  std::size_t line_;
};

} // namespace

RequestLine parse_request_line(const std::string& line, std::size_t line_number,
                               const SamplingParams& defaults) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("line " + std::to_string(line_number) +
                                ": not valid JSON: " + e.what());
  }
  LineReader read(j, line_number);
  if (!j.is_object())
    read.fail("expected a JSON object, not " + std::string(j.type_name()));
  for (const auto& [field, value] : j.items()) {
    if (std::find(kFields.begin(), kFields.end(), field) != kFields.end())
      continue;
    std::string_view nearest = kFields.front();
    for (std::string_view known : kFields)
      if (distance(field, known) < distance(field, nearest))
        nearest = known;
    read.fail("unknown field \"" + field + "\"" +
              (distance(field, nearest) <= 3 ? " (did you mean \"" + std::string(nearest) + "\"?)"
                                             : std::string()));
  }

  RequestLine out;
  out.id = nlohmann::json(line_number);
  if (const nlohmann::json* id = read.find("id")) {
    if (!id->is_string() && !id->is_number_integer())
      read.fail("\"id\" must be a string or an integer, not " + id->dump());
    out.id = *id;
  }
  GenerateRequest& r = out.request;
  const nlohmann::json* prompt = read.find("prompt");
  const nlohmann::json* tokens = read.find("prompt_tokens");
  if ((prompt == nullptr) == (tokens == nullptr))
    read.fail("give exactly one of \"prompt\" and \"prompt_tokens\"");
  if (prompt != nullptr) {
    if (!prompt->is_string())
      read.fail("\"prompt\" must be a string, not " + prompt->dump());
    r.prompt = prompt->get<std::string>();
    if (r.prompt.empty())
      read.fail("\"prompt\" is empty");
    if (r.prompt.size() > kDefaultMaxPromptBytes)
      read.fail("\"prompt\" holds " + std::to_string(r.prompt.size()) + " bytes; at most " +
                std::to_string(kDefaultMaxPromptBytes));
  } else {
    if (!tokens->is_array() || tokens->empty())
      read.fail("\"prompt_tokens\" must be a non-empty array of token ids");
    for (const nlohmann::json& token : *tokens) {
      if (!token.is_number_unsigned() ||
          token.get<std::uint64_t>() > std::numeric_limits<TokenId>::max())
        read.fail("\"prompt_tokens\" holds " + token.dump() + ", not a token id");
      r.prompt_tokens.push_back(token.get<TokenId>());
    }
  }

  SamplingParams& p = r.params;
  p = defaults;
  read.integer("max_tokens", p.max_tokens, 1, std::numeric_limits<std::uint32_t>::max());
  read.number("temperature", p.temperature);
  read.number("top_p", p.top_p);
  read.integer("top_k", p.top_k, -1, std::numeric_limits<std::int32_t>::max());
  read.number("min_p", p.min_p);
  read.number("repetition_penalty", p.repetition_penalty);
  read.number("presence_penalty", p.presence_penalty);
  read.number("frequency_penalty", p.frequency_penalty);
  if (read.find("seed") != nullptr) {
    std::uint64_t seed = 0;
    read.integer("seed", seed, 0, std::numeric_limits<std::uint64_t>::max());
    p.seed = seed;
  }
  read.boolean("ignore_eos", p.ignore_eos);
  read.integer("top_logprobs", p.top_logprobs, 0, kMaxTopLogprobs);
  read.integer("priority", r.priority, std::numeric_limits<std::int32_t>::min(),
               std::numeric_limits<std::int32_t>::max());
  if (const nlohmann::json* stop = read.find("stop")) {
    p.stop.clear();
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const nlohmann::json& s : *stop) {
        if (!s.is_string())
          read.fail("\"stop\" holds " + s.dump() + ", not a string");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      read.fail("\"stop\" must be a string or an array of strings, not " + stop->dump());
    }
    // An engine's limits, said here with the line's number.
    if (p.stop.size() > kDefaultMaxStopStrings)
      read.fail("\"stop\" holds " + std::to_string(p.stop.size()) + " strings; at most " +
                std::to_string(kDefaultMaxStopStrings));
    for (std::size_t i = 0; i < p.stop.size(); ++i)
      if (p.stop[i].size() > kDefaultMaxStopBytes)
        read.fail("\"stop\" string " + std::to_string(i) + " holds " +
                  std::to_string(p.stop[i].size()) + " bytes; at most " +
                  std::to_string(kDefaultMaxStopBytes));
  }
  if (auto problem = validate(p))
    read.fail(*problem);
  return out;
}

} // namespace caflm::apps
