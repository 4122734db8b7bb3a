// ggml's CPU GELU for f32 (GGML_GELU_FP16, on by default in ggml-cpu) does not evaluate tanh per
// element: it rounds x to fp16 and looks the answer up in a 65536-entry table of fp16 results
// (each entry gelu(x) in float, rounded to fp16); |x| >= 10 short-cuts to 0 or x. okapi mirrors
// that so gemma3's FFN rounds exactly like llama.cpp.
#pragma once

namespace okapi::kernels::detail {

// gelu(x) with the tanh approximation in float (ggml_gelu_f32): the table's entries.
float gelu_tanh_exact(float x);
// gelu(x) as ggml's f32 CPU kernel computes it (fp16 table lookup).
float gelu_tanh_table(float x);

}  // namespace okapi::kernels::detail
