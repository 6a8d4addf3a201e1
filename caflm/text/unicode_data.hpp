#pragma once

#include "caflm/text/unicode.hpp"

#include <cstddef>
#include <cstdint>

/// Tables generated from the Unicode Character Database by
/// caflm/text/gen_unicode_data.py; unicode.cpp turns them into char_class().
namespace caflm::unicode {

/// Code points from `first` up to the next range's first share `category`.
struct CategoryRange {
  uint32_t first;
  CharClass category; ///< exactly one of the general category group bits
};

/// The Unicode version the tables come from, such as "15.0.0".
extern const char* const kUnicodeDataVersion;
/// Sorted by `first`; starts at U+0000 and covers up to U+10FFFF.
extern const CategoryRange kCategoryRanges[];
extern const size_t kCategoryRangeCount;
/// The code points with the White_Space property, ascending.
extern const uint32_t kWhitespaceCodePoints[];
extern const size_t kWhitespaceCount;

} // namespace caflm::unicode
