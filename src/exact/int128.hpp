// 128-bit integer names for the exact paths. __extension__ keeps -Wpedantic quiet: __int128 is a
// GCC/Clang extension (MSVC lacks it, which is why the dual-prime CRT path avoids it).
#pragma once

namespace okapi::exact {

__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

}  // namespace okapi::exact
