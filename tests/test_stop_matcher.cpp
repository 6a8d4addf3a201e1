// StopMatcher: stop strings in streamed text, held back until they are ruled
// out, never emitted themselves.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "caflm/text/stop_matcher.hpp"

using caflm::StopMatcher;

namespace {

/// What the matcher emits for `pieces`, flush included.
struct Streamed {
  std::string text;
  bool stopped;
};

Streamed stream(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  StopMatcher matcher(std::move(stops));
  std::string text;
  for (const std::string& piece : pieces)
    text += matcher.push(piece);
  text += matcher.flush();
  return {text, matcher.stopped()};
}

/// Every way of cutting `text` into two pieces, and into single bytes.
std::vector<std::vector<std::string>> splits(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  for (std::size_t cut = 0; cut <= text.size(); ++cut)
    out.push_back({text.substr(0, cut), text.substr(cut)});
  std::vector<std::string> bytes;
  for (char c : text)
    bytes.emplace_back(1, c);
  out.push_back(bytes);
  return out;
}

} // namespace

TEST_CASE("a stop string split across pushes is found and never emitted") {
  StopMatcher matcher({"STOP"});
  CHECK(matcher.push("hello S") == "hello ");
  CHECK_FALSE(matcher.stopped());
  CHECK(matcher.push("T") == "");
  CHECK(matcher.push("O") == "");
  CHECK(matcher.push("P and more") == "");
  CHECK(matcher.stopped());
  CHECK(matcher.push("later text") == "");
  CHECK(matcher.flush() == "");
}

TEST_CASE("held text that turns out not to be a stop string is released") {
  StopMatcher matcher({"STOP"});
  CHECK(matcher.push("a ST") == "a ");
  CHECK(matcher.push("ART") == "START");
  CHECK_FALSE(matcher.stopped());
}

TEST_CASE("the result does not depend on how the text is cut into pushes") {
  const std::string text = "one two STOP three";
  for (const auto& pieces : splits(text)) {
    INFO("pieces: " << pieces.size() << ", first: '" << pieces[0] << "'");
    auto out = stream({"STOP"}, pieces);
    CHECK(out.text == "one two ");
    CHECK(out.stopped);
  }
}

TEST_CASE("overlapping candidates: the shorter stop string ends the text") {
  // "ab" and "abc" share a start; "xxabd" holds "ab" but not "abc".
  for (const auto& pieces : splits("xxabd")) {
    INFO("pieces: " << pieces.size() << ", first: '" << pieces[0] << "'");
    auto out = stream({"abc", "ab"}, pieces);
    CHECK(out.text == "xx");
    CHECK(out.stopped);
  }
  // Neither "abc" nor "abx" occurs: everything comes out, "ab" only once
  // "d" rules both out.
  StopMatcher matcher({"abc", "abx"});
  CHECK(matcher.push("xxab") == "xx");
  CHECK(matcher.push("d") == "abd");
  CHECK_FALSE(matcher.stopped());
}

TEST_CASE("the earliest stop string in the text wins") {
  // Both occur in one push; "lo" starts first.
  CHECK(stream({"world", "lo"}, {"hello world"}).text == "hel");
  CHECK(stream({"lo", "world"}, {"hello world"}).text == "hel");
  // Only the later one occurs.
  CHECK(stream({"world", "xyz"}, {"hello ", "world"}).text == "hello ");
}

TEST_CASE("text before a stop is emitted as soon as it cannot start one") {
  StopMatcher matcher({"</s>"});
  CHECK(matcher.push("abc") == "abc");
  CHECK(matcher.push("de<") == "de");
  CHECK(matcher.push("/") == "");
  CHECK(matcher.push("s>tail") == "");
  CHECK(matcher.stopped());
}

TEST_CASE("flush returns the held text when no stop came") {
  StopMatcher matcher({"STOP"});
  CHECK(matcher.push("the end ST") == "the end ");
  CHECK(matcher.flush() == "ST");
  CHECK_FALSE(matcher.stopped());
  // Nothing held: nothing to flush.
  StopMatcher plain({"STOP"});
  CHECK(plain.push("all of it") == "all of it");
  CHECK(plain.flush() == "");
}

TEST_CASE("no stop strings, or only empty ones, pass text straight through") {
  for (auto stops : {std::vector<std::string>{}, std::vector<std::string>{""},
                     std::vector<std::string>{"", ""}}) {
    StopMatcher matcher(stops);
    CHECK(matcher.push("abc") == "abc");
    CHECK(matcher.push("") == "");
    CHECK(matcher.push("def") == "def");
    CHECK(matcher.flush() == "");
    CHECK_FALSE(matcher.stopped());
  }
  // An empty stop string beside a real one is ignored; the real one works.
  CHECK(stream({"", "X"}, {"abXcd"}).text == "ab");
  CHECK(stream({"", "X"}, {"abcd"}).text == "abcd");
}

TEST_CASE("multi-byte UTF-8 stop strings") {
  const std::string stop = "日本"; // 6 bytes
  const std::string text = "テキスト日本語";
  for (const auto& pieces : splits(text)) {
    INFO("pieces: " << pieces.size() << ", first: '" << pieces[0] << "'");
    auto out = stream({stop}, pieces);
    CHECK(out.text == "テキスト");
    CHECK(out.stopped);
  }
  // A character that shares its first byte with the stop string's (日 is
  // E6 97 A5, 本 E6 9C AC) is held only until its next byte differs.
  StopMatcher matcher({stop});
  CHECK(matcher.push("\xE6") == "");
  CHECK(matcher.push("\x9C\xAC") == "本");
  CHECK_FALSE(matcher.stopped());
  // An emoji stop string.
  CHECK(stream({"🦙"}, {"llama \xF0\x9F", "\xA6\x99 tail"}).text == "llama ");
}
