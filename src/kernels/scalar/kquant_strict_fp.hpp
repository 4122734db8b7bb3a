// Include FIRST in every k-quant source file (before any other header): it makes the rest of the
// translation unit round every float multiply and add separately, as ggml's reference build does.
// GCC fuses a*b+c into one FMA whenever the target has FMA (e.g. -march=native), also in ISO C++
// mode, and that changes the chosen levels in about 1 of 6 Q2_K blocks; the goldens match only
// without fusion. (An explicit -ffp-contract=fast on Clang still wins over the pragma; the
// snapshot and golden tests catch that.)
#pragma once

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
