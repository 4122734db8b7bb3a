// Constants of det::exp shared by the scalar code (detmath.cpp) and the AVX2 batch
// (avx2/detmath_avx2.cpp), which must perform the very same IEEE operations.
#pragma once

namespace okapi::exact::det::detail {

// ln 2 split so that k * kLn2Hi is exact for |k| < 2^11 (kLn2Hi has 32 trailing zero bits).
inline constexpr double kLn2Hi = 6.93147180369123816490e-01;
inline constexpr double kLn2Lo = 1.90821492927058770002e-10;
inline constexpr double kInvLn2 = 1.44269504088896338700e+00;
inline constexpr double kHalfLn2 = 3.46573590279972654709e-01;
inline constexpr double kExpOverflow = 7.09782712893383973096e+02;   // exp(x) = inf above
inline constexpr double kExpUnderflow = -7.45133219101941108420e+02;  // exp(x) = 0 below
inline constexpr double kExpTiny = 3.725290298461914e-09;             // 2^-28: exp(x) = 1 + x below
// fdlibm e_exp.c: minimax polynomial for R(r^2) = r (e^r + 1) / (e^r - 1) - 2 on |r| <= ln2/2.
inline constexpr double kExpP1 = 1.66666666666666019037e-01;
inline constexpr double kExpP2 = -2.77777777770155933842e-03;
inline constexpr double kExpP3 = 6.61375632143793436117e-05;
inline constexpr double kExpP4 = -1.65339022054652515390e-06;
inline constexpr double kExpP5 = 4.13813679705723846039e-08;

}  // namespace okapi::exact::det::detail
