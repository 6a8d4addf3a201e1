// libFuzzer target for the request bodies of the OpenAI server
// (caflm/server/openai_protocol.cpp): every input is parsed as a
// /v1/chat/completions body and as a /v1/completions body. What must hold:
// - each parser returns a request or throws ApiError with status 400; no
//   other exception (a JSON library error escaping...), crash, sanitizer
//   report or hang;
// - the error body the server would send for that ApiError serializes
//   (dump_json never throws, whatever bytes the message quotes);
// - an accepted request keeps the limits the parsers promise: sampling that
//   caflm::validate() accepts, 1 <= n <= kMaxChoices, at most kMaxStopStrings
//   stop strings of at most kMaxStopBytes each, chat content and completion
//   text prompts of at most kMaxPromptBytes, at least one message or prompt.
// See fuzz/CMakeLists.txt for how to build and run it.

#include "caflm/sampling/sampling_params.hpp"
#include "caflm/server/openai_protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

using namespace caflm::server;

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "openai_protocol_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void check_common(const ParsedCommon& request) {
  if (auto problem = caflm::validate(request.sampling)) {
    fail("an accepted request has invalid sampling parameters", *problem);
  }
  if (request.n < 1 || request.n > kMaxChoices) {
    fail("an accepted request has n out of range", std::to_string(request.n));
  }
  if (request.sampling.stop.size() > kMaxStopStrings) {
    fail("an accepted request has too many stop strings",
         std::to_string(request.sampling.stop.size()));
  }
  for (const std::string& stop : request.sampling.stop) {
    if (stop.size() > kMaxStopBytes) {
      fail("an accepted request has a stop string too long", std::to_string(stop.size()));
    }
  }
}

void check_chat(const ParsedChatRequest& request) {
  check_common(request);
  if (request.messages.empty()) {
    fail("an accepted chat request has no messages", "");
  }
  std::uint64_t bytes = 0;
  for (const caflm::ChatMessage& message : request.messages) {
    bytes += message.content.size();
  }
  if (bytes > kMaxPromptBytes) {
    fail("an accepted chat request's content is too long", std::to_string(bytes));
  }
}

void check_completion(const ParsedCompletionRequest& request) {
  check_common(request);
  if (request.prompts.empty()) {
    fail("an accepted completion request has no prompt", "");
  }
  for (const CompletionPrompt& prompt : request.prompts) {
    if (!prompt.is_tokens && prompt.text.size() > kMaxPromptBytes) {
      fail("an accepted completion prompt is too long", std::to_string(prompt.text.size()));
    }
  }
}

/// Runs `parse` on `body`; checks what it returns, or the ApiError it throws.
template <class Parse, class Check>
void parse_checked(const char* endpoint, Parse parse, Check check, const std::string& body) {
  try {
    check(parse(body));
  } catch (const ApiError& error) {
    if (error.status != 400) {
      fail("a body was refused with a status other than 400",
           std::string(endpoint) + ": " + std::to_string(error.status));
    }
    try {
      volatile std::size_t length = dump_json(error_body(error)).size();
      (void)length;
    } catch (const std::exception& e) {
      fail("an error body does not serialize", std::string(endpoint) + ": " + e.what());
    }
  } catch (const std::exception& e) {
    fail("an exception other than ApiError", std::string(endpoint) + ": " + e.what());
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  parse_checked("chat", parse_chat_request, check_chat, body);
  parse_checked("completions", parse_completion_request, check_completion, body);
  return 0;
}
