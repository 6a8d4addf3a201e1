// libFuzzer target for the JSONL request reader of `caflm generate --requests`
// (apps/request_file.cpp): the input is one line. What must hold, for any line:
// - parse_request_line() returns a request or throws std::invalid_argument
//   whose message names the line; no other exception (a JSON library error
//   escaping, std::out_of_range...), crash, sanitizer report or hang;
// - a request it returns has sampling parameters that caflm::validate()
//   accepts, and its "id" is a JSON scalar.
// See fuzz/CMakeLists.txt for how to build and run it.

#include "apps/request_file.hpp"
#include "caflm/sampling/sampling_params.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

namespace {

constexpr std::size_t kLineNumber = 7;

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "request_file_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  caflm::SamplingParams defaults;
  defaults.max_tokens = 32;
  defaults.stop = {"\n\n"};
  try {
    const caflm::apps::RequestLine read =
        caflm::apps::parse_request_line(line, kLineNumber, defaults);
    if (auto problem = caflm::validate(read.request.params)) {
      fail("an accepted line has invalid sampling parameters", *problem);
    }
    if (!read.id.is_primitive() || read.id.is_null()) {
      fail("an accepted line has an id that is no scalar", read.id.dump());
    }
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    if (message.find(std::to_string(kLineNumber)) == std::string::npos) {
      fail("an error does not name the line", message);
    }
  } catch (const std::exception& e) {
    fail("an exception other than std::invalid_argument", e.what());
  }
  return 0;
}
