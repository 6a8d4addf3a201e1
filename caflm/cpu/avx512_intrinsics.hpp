#pragma once

// <immintrin.h> for the files compiled with AVX-512 (caflm/cpu/CMakeLists.txt).
// GCC 12's AVX-512 intrinsics (_mm512_cvtepi32_ps, _mm512_extractf32x8_ps,
// _mm512_cvtph_ps...) initialize their pass-through operand from an undefined
// value, which its own -Wuninitialized flags once they are inlined; nothing
// there is uninitialized. The pragmas hold for the rest of the including file,
// so include this before any other header that may bring in <immintrin.h>.
// Internals of caflm/cpu; include nowhere else.

#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__) // clang has no such warning, and warns of the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
