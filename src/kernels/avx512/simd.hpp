// <immintrin.h> for the files under avx512/ folders. GCC 12 reports the AVX-512 intrinsics'
// internal _mm512_undefined_*() operands as (maybe-)uninitialized once inlined (a false
// positive, fixed in later GCCs); the warnings are silenced for the header's lines only.
// Include ONLY from files compiled with the avx512 tier's flags.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
