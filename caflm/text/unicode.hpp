#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

/// UTF-8 handling and the Unicode character classes the tokenizers need.
/// Classes come from tables generated from the Unicode Character Database
/// (unicode_data.cpp), grouped as llama.cpp groups them.
namespace caflm::unicode {

/// U+FFFD, written for bytes that are not valid UTF-8.
inline constexpr uint32_t kReplacementCharacter = 0xFFFD;

/// Character classes tested by the pre-tokenizer regexes. Every code point has
/// exactly one general category group bit; kWhitespace may come on top.
enum CharClass : uint16_t {
  kLetter = 1 << 0,      ///< \p{L}: Lu, Ll, Lt, Lm, Lo
  kNumber = 1 << 1,      ///< \p{N}: Nd, Nl, No
  kWhitespace = 1 << 2,  ///< \s: the Unicode White_Space property
  kPunctuation = 1 << 3, ///< \p{P}: Pc, Pd, Ps, Pe, Pi, Pf, Po
  kSymbol = 1 << 4,      ///< \p{S}: Sm, Sc, Sk, So
  kMark = 1 << 5,        ///< \p{M}: Mn, Mc, Me
  kSeparator = 1 << 6,   ///< \p{Z}: Zs, Zl, Zp
  kControl = 1 << 7,     ///< Cc, Cf, Co, Cs
  kUndefined = 1 << 8,   ///< Cn (unassigned), and anything above U+10FFFF
};

/// The CharClass bits of `code_point`.
uint16_t char_class(uint32_t code_point);

/// The Unicode version the class tables come from, such as "15.0.0".
const char* unicode_version();

/// Length of the UTF-8 sequence that `lead` starts, judged from its high nibble
/// alone (continuation and invalid bytes count as 1), as llama.cpp splits text.
size_t utf8_sequence_length(char lead);

/// Appends the UTF-8 encoding of `code_point` (at most U+10FFFF; anything larger
/// is written as U+FFFD).
void append_utf8(std::string& out, uint32_t code_point);

/// Decodes `text` the lenient way llama.cpp does before pre-tokenizing: a lead
/// byte followed by the right number of continuation bytes is one code point
/// (overlong forms and surrogates included); any other byte becomes one U+FFFD.
/// Keeping exactly these rules keeps the token ids identical to llama.cpp's on
/// malformed input too.
std::vector<uint32_t> decode_utf8_lenient(std::string_view text);

/// What starts at the front of a byte string, under strict UTF-8 rules
/// (shortest form only, no surrogates, nothing above U+10FFFF).
struct Utf8Prefix {
  enum class Kind {
    Valid,      ///< a complete character of `length` bytes
    Invalid,    ///< `length` bytes (the maximal invalid subpart) can never start a character
    Incomplete, ///< every byte present is a valid start of a longer character
  };
  Kind kind;
  size_t length;
};

/// Classifies the front of `bytes`, which must not be empty.
Utf8Prefix read_utf8_prefix(std::string_view bytes);

/// `bytes` with every invalid or truncated sequence replaced by U+FFFD, one per
/// maximal subpart (the Unicode and WHATWG practice, also Python's "replace").
std::string sanitize_utf8(std::string_view bytes);

/// GPT-2's byte-level alphabet: the printable code point that stands for `byte`
/// in byte-level BPE token texts (so that every token is printable text).
uint32_t byte_to_byte_level(uint8_t byte);

/// Inverse of byte_to_byte_level; nullopt for code points outside the alphabet.
std::optional<uint8_t> byte_level_to_byte(uint32_t code_point);

} // namespace caflm::unicode
