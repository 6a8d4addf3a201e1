#include "caflm/text/unicode.hpp"

#include "caflm/text/unicode_data.hpp"

#include <algorithm>
#include <array>
#include <vector>

namespace caflm::unicode {

namespace {

uint16_t char_class_from_tables(uint32_t code_point) {
  // The last range whose first code point is not above `code_point`.
  const CategoryRange* end = kCategoryRanges + kCategoryRangeCount;
  const CategoryRange* range =
      std::upper_bound(kCategoryRanges, end, code_point,
                       [](uint32_t c, const CategoryRange& r) { return c < r.first; }) -
      1;
  uint16_t result = range->category;
  if (std::binary_search(kWhitespaceCodePoints, kWhitespaceCodePoints + kWhitespaceCount,
                         code_point)) {
    result |= kWhitespace;
  }
  return result;
}

// The Basic Multilingual Plane holds nearly all text; a table for it spares the
// binary searches (128 KiB, built on first use).
const std::vector<uint16_t>& bmp_classes() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> classes(0x10000);
    for (uint32_t c = 0; c < classes.size(); ++c) {
      classes[c] = char_class_from_tables(c);
    }
    return classes;
  }();
  return table;
}

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the
// other 68 bytes map in byte order to U+0100, U+0101, ...
constexpr std::array<uint32_t, 256> kByteToByteLevel = [] {
  std::array<uint32_t, 256> table{};
  uint32_t next_substitute = 256;
  for (uint32_t byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) ||
                           (byte >= 0xAE && byte <= 0xFF);
    table[byte] = printable ? byte : next_substitute++;
  }
  return table;
}();

// Inverse of kByteToByteLevel, -1 where no byte maps; the alphabet ends below U+0144.
constexpr std::array<int16_t, 0x144> kByteLevelToByte = [] {
  std::array<int16_t, 0x144> table{};
  for (int16_t& entry : table) {
    entry = -1;
  }
  for (uint32_t byte = 0; byte < 256; ++byte) {
    table[kByteToByteLevel[byte]] = static_cast<int16_t>(byte);
  }
  return table;
}();

bool is_continuation(unsigned char byte) {
  return (byte & 0xC0) == 0x80;
}

} // namespace

uint16_t char_class(uint32_t code_point) {
  if (code_point < 0x10000) {
    return bmp_classes()[code_point];
  }
  if (code_point > 0x10FFFF) {
    return kUndefined;
  }
  return char_class_from_tables(code_point);
}

const char* unicode_version() {
  return kUnicodeDataVersion;
}

size_t utf8_sequence_length(char lead) {
  static constexpr std::array<uint8_t, 16> kLengthByHighNibble = {1, 1, 1, 1, 1, 1, 1, 1,
                                                                  1, 1, 1, 1, 2, 2, 3, 4};
  return kLengthByHighNibble[static_cast<unsigned char>(lead) >> 4];
}

void append_utf8(std::string& out, uint32_t code_point) {
  if (code_point > 0x10FFFF) {
    code_point = kReplacementCharacter;
  }
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

std::vector<uint32_t> decode_utf8_lenient(std::string_view text) {
  std::vector<uint32_t> code_points;
  code_points.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const auto lead = static_cast<unsigned char>(text[pos]);
    if (lead < 0x80) {
      code_points.push_back(lead);
      ++pos;
      continue;
    }
    // The lead byte gives the number of continuation bytes and its payload bits;
    // a lone continuation byte or 0xF8..0xFF has no reading.
    size_t n_continuation = 0;
    uint32_t code_point = 0;
    if ((lead & 0xE0) == 0xC0) {
      n_continuation = 1;
      code_point = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      n_continuation = 2;
      code_point = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      n_continuation = 3;
      code_point = lead & 0x07;
    }
    bool complete = n_continuation > 0 && pos + n_continuation < text.size();
    for (size_t i = 1; complete && i <= n_continuation; ++i) {
      const auto byte = static_cast<unsigned char>(text[pos + i]);
      complete = is_continuation(byte);
      code_point = (code_point << 6) | (byte & 0x3F);
    }
    if (!complete) {
      code_points.push_back(kReplacementCharacter);
      ++pos;
      continue;
    }
    // Four-byte forms reach up to 0x1FFFFF; values above U+10FFFF have no character.
    code_points.push_back(code_point > 0x10FFFF ? kReplacementCharacter : code_point);
    pos += n_continuation + 1;
  }
  return code_points;
}

Utf8Prefix read_utf8_prefix(std::string_view bytes) {
  using Kind = Utf8Prefix::Kind;
  const auto lead = static_cast<unsigned char>(bytes[0]);
  if (lead < 0x80) {
    return {Kind::Valid, 1};
  }
  size_t length = 0;
  // The second byte's range is narrowed for some leads so that overlong forms,
  // surrogates and values above U+10FFFF are rejected (Unicode table 3-7).
  unsigned char second_min = 0x80;
  unsigned char second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) {
      second_min = 0xA0;
    } else if (lead == 0xED) {
      second_max = 0x9F;
    }
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) {
      second_min = 0x90;
    } else if (lead == 0xF4) {
      second_max = 0x8F;
    }
  } else {
    return {Kind::Invalid, 1};
  }
  for (size_t i = 1; i < length; ++i) {
    if (i >= bytes.size()) {
      return {Kind::Incomplete, i};
    }
    const auto byte = static_cast<unsigned char>(bytes[i]);
    const unsigned char min = i == 1 ? second_min : 0x80;
    const unsigned char max = i == 1 ? second_max : 0xBF;
    if (byte < min || byte > max) {
      return {Kind::Invalid, i};
    }
  }
  return {Kind::Valid, length};
}

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Prefix prefix = read_utf8_prefix(bytes.substr(pos));
    if (prefix.kind == Utf8Prefix::Kind::Valid) {
      out.append(bytes.substr(pos, prefix.length));
    } else {
      append_utf8(out, kReplacementCharacter);
    }
    pos += prefix.length;
  }
  return out;
}

uint32_t byte_to_byte_level(uint8_t byte) {
  return kByteToByteLevel[byte];
}

std::optional<uint8_t> byte_level_to_byte(uint32_t code_point) {
  if (code_point >= kByteLevelToByte.size() || kByteLevelToByte[code_point] < 0) {
    return std::nullopt;
  }
  return static_cast<uint8_t>(kByteLevelToByte[code_point]);
}

} // namespace caflm::unicode
